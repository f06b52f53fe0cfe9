// Copy-plan gather and scatter for gpubuf's CUDA backend, compiled by NVRTC at run time.
//
// Same semantics as kernels/opencl/plan.cl: a plan is a table of segments (12 long longs:
// source, offset, e0, e1, e2, e3, s0, s1, s2, s3, dst, negate) plus prefix sums `starts`;
// one thread per element finds its segment by binary search and decomposes its index over
// the box's extents (C order). Values move as unsigned integers of the element width, so
// every dtype is bit-exact; negation flips the sign bit of floats and takes the two's
// complement of integers.
//
// Source pointers arrive by value in a SrcTable kernel parameter (already offset to the
// source's first element), so a launch never reads a pointer table another launch may be
// rewriting, and plans need no per-launch upload.

#define SEG_WORDS 12
#define MAX_SOURCES 256

struct SrcTable {
    unsigned long long ptr[MAX_SOURCES];
};

__device__ __forceinline__ int find_segment(const long long* __restrict__ starts, int nseg, long long t) {
    int lo = 0;
    int hi = nseg;
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (starts[mid] <= t) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

__device__ __forceinline__ long long box_index(const long long* __restrict__ seg, long long l) {
    long long i3 = l % seg[5];
    l /= seg[5];
    long long i2 = l % seg[4];
    l /= seg[4];
    long long i1 = l % seg[3];
    long long i0 = l / seg[3];
    return seg[1] + i0 * seg[6] + i1 * seg[7] + i2 * seg[8] + i3 * seg[9];
}

// One kernel shape for both directions: MOVE reads or writes the array side.
#define PLAN_KERNEL(NAME, T, W, BUF_T, ARR_T, MOVE)                                             \
    extern "C" __global__ void NAME##_##W(const long long* __restrict__ segs,                   \
                                          const long long* __restrict__ starts, int nseg,       \
                                          long long total, int is_float,                        \
                                          BUF_T* __restrict__ buf, SrcTable arrays) {           \
        long long stride = (long long)gridDim.x * blockDim.x;                                  \
        for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;         \
             t += stride) {                                                                     \
            int k = find_segment(starts, nseg, t);                                              \
            const long long* seg = segs + (long long)k * SEG_WORDS;                             \
            long long l = t - starts[k];                                                        \
            ARR_T* arr = (ARR_T*)arrays.ptr[seg[0]];                                            \
            long long idx = box_index(seg, l);                                                  \
            long long at = seg[10] + l;                                                         \
            MOVE(W)                                                                             \
        }                                                                                       \
    }

#define GATHER_MOVE(W) { auto v = arr[idx]; if (seg[11]) v = negate_##W(v, is_float); buf[at] = v; }
#define SCATTER_MOVE(W) { auto v = buf[at]; if (seg[11]) v = negate_##W(v, is_float); arr[idx] = v; }

#define DEFINE_PLAN(T, W)                                                                       \
    __device__ __forceinline__ T negate_##W(T v, int is_float) {                                \
        return is_float ? (T)(v ^ (T)((T)1 << (8 * sizeof(T) - 1))) : (T)((T)0 - v);           \
    }                                                                                           \
    PLAN_KERNEL(gather, T, W, T, const T, GATHER_MOVE)                                          \
    PLAN_KERNEL(scatter, T, W, const T, T, SCATTER_MOVE)

DEFINE_PLAN(unsigned char, 1)
DEFINE_PLAN(unsigned short, 2)
DEFINE_PLAN(unsigned int, 4)
DEFINE_PLAN(unsigned long long, 8)
