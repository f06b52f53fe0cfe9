// CUDA C words for the shared kernel sources (kernels/shared/*.h). kernels/opencl/prelude.cl
// defines the same names for OpenCL C; nothing else differs between the two builds.

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#define DEVICE_FN __device__ __forceinline__
#define NOINLINE_FN __device__ __noinline__
#define GLOBAL
#define LOCAL_VAR __shared__
#define LOCAL_PTR
#define RESTRICT __restrict__
#define UNROLL _Pragma("unroll")
// The high 32 bits of the 64-bit product of two 32-bit unsigned integers.
#define MUL_HI(a, b) __umulhi((u32)(a), (u32)(b))
#define BARRIER() __syncthreads()
#define GROUP_ID() ((i64)blockIdx.x)
#define LOCAL_ID() ((int)threadIdx.x)
#define GLOBAL_ID(d) \
    ((d) == 0 ? (u64)blockIdx.x * blockDim.x + threadIdx.x : (u64)blockIdx.y * blockDim.y + threadIdx.y)
#define KERNEL extern "C" __global__ void
// At least three blocks an SM: a halo exchange is a few hundred blocks, one wave at three
// an SM on an H200 (132 SMs). Left free, the 8-byte gather took 128 registers (two an SM);
// capped it takes 80 (measured: halo packs and unpacks 0.05-0.1 of a device copy faster).
#define BLOCK_KERNEL extern "C" __global__ void __launch_bounds__(THREADS, 3)

// Block shape: 4096 elements, 64 x 64 tiles (measured on an H200: blocks of 1024 spent a
// third of a contiguous gather finding their segment).
#define ELEMS 4096
#define TILE 64

// The sources of a block kernel: a table of MAX_SOURCES pointers passed by value (each
// already at its source's first element), so a launch never reads a table another launch
// may be rewriting.
#define MAX_SOURCES 256
struct SrcTable {
    u64 ptr[MAX_SOURCES];
};
#define PLAN_SOURCES(T) , SrcTable arrays
#define BUF_OFF 0
#define BUF_BYTE ((u64)buf)
#define SRC_BYTE(i, w) arrays.ptr[i]
#define SRC_PICK(i, p) p = (decltype(p))arrays.ptr[i]

// 16-byte vectors of each element width, negated lane by lane.
#define VEC_1 uint4
#define VEC_2 uint4
#define VEC_4 uint4
#define VEC_8 uint4
template <typename T>
DEVICE_FN uint4 vneg(uint4 v, T flip, T add) {
    union {
        uint4 v;
        T e[16 / sizeof(T)];
    } x;
    x.v = v;
    UNROLL
    for (int i = 0; i < 16 / (int)sizeof(T); i++) x.e[i] = (T)((x.e[i] ^ flip) + add);
    return x.v;
}
#define VNEG(x, flip, add) vneg((x), (flip), (add))
