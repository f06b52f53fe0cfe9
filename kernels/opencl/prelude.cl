// OpenCL C words for the shared kernel sources (kernels/shared/*.h). kernels/cuda/prelude.cuh
// defines the same names for CUDA C; nothing else differs between the two builds.
//
// The host puts its own lines before this (gpubuf-opencl's shape.rs `prelude`): CHUNK,
// SRC_PARAMS(T) (one `__global T*` parameter per source slot) and SRC_PICK(i, p) (p = slot
// i plus offs[i], the slot's element offset in its allocation).

// Macros, not typedefs: a kernel argument's type name (clGetKernelArgInfo, which gpubuf's
// user-kernel checks read) is then OpenCL's own.
#define i64 long
#define u64 ulong
#define u32 uint
#define u16 ushort
#define u8 uchar

#define DEVICE_FN inline
#define NOINLINE_FN
#define GLOBAL __global
#define LOCAL_VAR __local
#define LOCAL_PTR __local
#define RESTRICT
#define UNROLL
// The high 32 bits of the 64-bit product of two 32-bit unsigned integers.
#define MUL_HI(a, b) mul_hi((u32)(a), (u32)(b))
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define GROUP_ID() ((i64)get_group_id(0))
#define LOCAL_ID() ((int)get_local_id(0))
#define GLOBAL_ID(d) ((u64)get_global_id(d))
#define KERNEL __kernel void
#define BLOCK_KERNEL __kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void

// Block shape: 1024 elements, 32 x 32 tiles (an 8-byte 64 x 64 tile needs more local
// memory than some OpenCL devices have).
#define ELEMS 1024
#define TILE 32

// The sources of a block kernel: the buffer's element offset in its allocation, each
// slot's offset (`offs`), and the slots. OpenCL aligns every allocation to at least 64
// bytes, so a source's address modulo 16 is its element offset's.
#define PLAN_SOURCES(T) , i64 buf_off, __global const i64* offs SRC_PARAMS(T)
#define BUF_OFF buf_off
#define BUF_BYTE ((u64)0)
#define SRC_BYTE(i, w) ((u64)offs[i] * (u64)(w))

// 16-byte vectors of each element width, negated lane by lane.
#define VEC_1 uchar16
#define VEC_2 ushort8
#define VEC_4 uint4
#define VEC_8 ulong2
#define VNEG(x, flip, add) (((x) ^ (flip)) + (add))
