// Copy-plan gather and scatter for gpubuf's CUDA backend.
//
// The same algorithm as kernels/opencl/plan_blocks.cl (OpenCL on GPUs); a change to one
// is made to both. Only the block shape differs: 4096 elements and 64 x 64 tiles here,
// 1024 and 32 x 32 there (the host's BLOCK_ELEMS of each backend says which). The host
// cuts the plan into blocks (gpubuf-core's encode.rs
// `encode_blocks`, ELEMS elements per block): segment records of SEG_WORDS long longs
// (source, offset, e0..e3, s0..s3, dst, negate, mode, len; dims merged where the source is
// dense across them) and `groups`, the prefix sums of the segments' block counts. One
// CUDA block of THREADS threads runs one table block. Thread 0 finds the block's segment
// (one binary search) and its first element once, into shared memory; each thread then
// moves ELEMS / THREADS independent elements (t, t + THREADS, ...: coalesced), a load and
// a store each, indices advanced from the block's start rather than decomposed per
// element. A block inside one row of source stride +1 whose array and buffer ends are both
// 16-byte aligned moves in 16-byte vectors. Transposed segments move in TILE x TILE tiles
// through shared memory. Threads past the end of a short block or an edge tile are
// clamped onto its last element, which they move again with the same value. Values move
// as unsigned integers of the element width, so every dtype is bit-exact; negation flips
// the sign bit of floats and takes the two's complement of integers.
//
// Source pointers arrive by value in a SrcTable kernel parameter (already offset to the
// source's first element), so a launch never reads a pointer table another launch may be
// rewriting, and plans need no per-launch upload.

#define SEG_WORDS 14
#define MODE_TILE 1
#define MAX_SOURCES 256
#define THREADS 256
#define ELEMS 4096
#define TILE 64
#define PER_THREAD (ELEMS / THREADS)

struct SrcTable {
    unsigned long long ptr[MAX_SOURCES];
};

struct Header {
    long long base, dbase, n, nc;
    long long i3, i2, i1, e3, e2, e1, m3, m2, m1;
    long long s0, s1, s2, s3;
    unsigned long long flip, add, arr;
    int fwd, bwd, til, vec;
};

__device__ __forceinline__ int find_segment(const long long* __restrict__ groups, int nseg, long long g) {
    int lo = 0;
    int hi = nseg;
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (groups[mid] <= g) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Multiplier for c / e as a multiply and a shift, exact for c < 2 * ELEMS; 0 when
// e >= ELEMS, where the dividends met are below 2 * e and the quotient is a comparison.
__device__ __forceinline__ long long magic(long long e) {
    return e < ELEMS ? (long long)(((1ull << 32) + (unsigned long long)e - 1) / (unsigned long long)e) : 0;
}

__device__ __forceinline__ long long small_div(long long c, long long e, long long m) {
    return m ? (long long)(((unsigned long long)c * (unsigned long long)m) >> 32) : (long long)(c >= e);
}

// Fills the header of this block. `buf` is the buffer's first element; the array's
// address comes from the source table.
__device__ void block_header(Header& h, const long long* __restrict__ segs,
                             const long long* __restrict__ groups, int nseg, int is_float, int width,
                             unsigned long long buf, const SrcTable& arrays) {
    long long g = blockIdx.x;
    int k = find_segment(groups, nseg, g);
    const long long* seg = segs + (long long)k * SEG_WORDS;
    long long e1 = seg[3], e2 = seg[4], e3 = seg[5];
    long long s0 = seg[6], s1 = seg[7], s2 = seg[8], s3 = seg[9];
    long long b = g - groups[k];
    bool neg = seg[11] != 0;
    long long len = seg[13];
    unsigned long long sign = 1ull << (8 * width - 1);
    h.flip = neg ? (is_float ? sign : ~0ull) : 0;
    h.add = (neg && !is_float) ? 1 : 0;
    h.arr = arrays.ptr[seg[0]];
    h.s0 = s0;
    h.s1 = s1;
    h.s2 = s2;
    h.s3 = s3;
    h.e3 = e3;
    h.e2 = e2;
    h.e1 = e1;
    h.fwd = h.bwd = h.til = h.vec = 0;
    if (seg[12] == MODE_TILE) {
        long long ct = (e3 + TILE - 1) / TILE;
        long long rt = (e2 + TILE - 1) / TILE;
        long long cb = b % ct;
        b /= ct;
        long long rb = b % rt;
        b /= rt;
        long long i1 = b % e1, i0 = b / e1;
        long long q0 = rb * TILE, c0 = cb * TILE;
        h.base = seg[1] + i0 * s0 + i1 * s1 + q0 * s2 + c0 * s3;
        h.dbase = seg[10] + ((i0 * e1 + i1) * e2 + q0) * e3 + c0;
        h.n = min((long long)TILE, e2 - q0);
        h.nc = min((long long)TILE, e3 - c0);
        h.til = 1;
        return;
    }
    // ELEMS elements from `start`; the last block of a segment ends at its end.
    long long start = len >= ELEMS ? min(b * ELEMS, len - ELEMS) : 0;
    long long i3 = start % e3, r = start / e3;
    long long i2 = r % e2;
    r /= e2;
    long long i1 = r % e1, i0 = r / e1;
    h.base = seg[1] + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3;
    h.dbase = seg[10] + start;
    h.n = min((long long)ELEMS, len);
    bool row = len >= ELEMS && i3 + ELEMS <= e3;
    h.fwd = row && s3 == 1;
    h.bwd = row && s3 == -1;
    unsigned long long ends = (h.arr + (unsigned long long)h.base * width) | (buf + (unsigned long long)h.dbase * width);
    h.vec = h.fwd && (ends & 15) == 0;
    h.i3 = i3;
    h.i2 = i2;
    h.i1 = i1;
    h.m3 = magic(e3);
    h.m2 = magic(e2);
    h.m1 = magic(e1);
}

// The source index of the block's element l, carried over the extents from its first.
__device__ __forceinline__ long long general_index(const Header& h, long long l) {
    long long c3 = h.i3 + l;
    long long q3 = small_div(c3, h.e3, h.m3);
    long long c2 = h.i2 + q3;
    long long q2 = small_div(c2, h.e2, h.m2);
    long long c1 = h.i1 + q2;
    long long q1 = small_div(c1, h.e1, h.m1);
    return h.base + (c3 - q3 * h.e3 - h.i3) * h.s3 + (c2 - q2 * h.e2 - h.i2) * h.s2 +
           (c1 - q1 * h.e1 - h.i1) * h.s1 + q1 * h.s0;
}

// 16 bytes of elements of T, negated element by element.
template <typename T>
union Vec16 {
    uint4 v;
    T e[16 / sizeof(T)];
};

template <typename T, bool GATHER>
__device__ __forceinline__ void plan_block(const long long* __restrict__ segs,
                                           const long long* __restrict__ groups, int nseg,
                                           int is_float, T* __restrict__ buf, const SrcTable& arrays) {
    __shared__ Header h;
    __shared__ T tile[TILE][TILE + 1];
    if (threadIdx.x == 0)
        block_header(h, segs, groups, nseg, is_float, (int)sizeof(T), (unsigned long long)buf, arrays);
    __syncthreads();
    T* __restrict__ arr = (T*)h.arr;
    const T flip = (T)h.flip, add = (T)h.add;
    const long long base = h.base, dbase = h.dbase;
    const int tid = threadIdx.x;
    if (h.til) {
        // The tile is [column (dim 3)][row (dim 2)]: rows are contiguous in the array,
        // columns in the buffer.
        const int n = (int)h.n, nc = (int)h.nc;
#pragma unroll
        for (int j = tid / TILE; j < TILE; j += THREADS / TILE) {
            if (GATHER) {
                int a = min(tid % TILE, n - 1), b = min(j, nc - 1);
                tile[b][a] = arr[base + a * h.s2 + b * h.s3];
            } else {
                int a = min(j, n - 1), b = min(tid % TILE, nc - 1);
                tile[b][a] = buf[dbase + a * h.e3 + b];
            }
        }
        __syncthreads();
#pragma unroll
        for (int j = tid / TILE; j < TILE; j += THREADS / TILE) {
            if (GATHER) {
                int a = min(j, n - 1), b = min(tid % TILE, nc - 1);
                buf[dbase + a * h.e3 + b] = (T)((tile[b][a] ^ flip) + add);
            } else {
                int a = min(tid % TILE, n - 1), b = min(j, nc - 1);
                arr[base + a * h.s2 + b * h.s3] = (T)((tile[b][a] ^ flip) + add);
            }
        }
        return;
    }
    if (h.vec) {
        // Both ends 16-byte aligned (checked in the header): NV vectors per block.
        constexpr int NV = ELEMS * (int)sizeof(T) / 16;
        constexpr int VPT = (NV + THREADS - 1) / THREADS;
        uint4* va = (uint4*)(arr + base);
        uint4* vb = (uint4*)(buf + dbase);
        Vec16<T> x[VPT];
#pragma unroll
        for (int j = 0; j < VPT; j++) {
            int q = min(tid + j * THREADS, NV - 1);
            x[j].v = GATHER ? va[q] : vb[q];
        }
#pragma unroll
        for (int j = 0; j < VPT; j++) {
            int q = min(tid + j * THREADS, NV - 1);
#pragma unroll
            for (int i = 0; i < 16 / (int)sizeof(T); i++) x[j].e[i] = (T)((x[j].e[i] ^ flip) + add);
            if (GATHER) vb[q] = x[j].v; else va[q] = x[j].v;
        }
        return;
    }
    const bool fwd = h.fwd, bwd = h.bwd;
    const long long n = h.n;
    T v[PER_THREAD];
    // All loads first, then all stores: PER_THREAD independent moves in flight.
#pragma unroll
    for (int j = 0; j < PER_THREAD; j++) {
        long long l = min((long long)(tid + j * THREADS), n - 1);
        if (fwd) {
            v[j] = GATHER ? arr[base + l] : buf[dbase + l];
        } else if (bwd) {
            v[j] = GATHER ? arr[base - l] : buf[dbase + l];
        } else {
            v[j] = GATHER ? arr[general_index(h, l)] : buf[dbase + l];
        }
    }
#pragma unroll
    for (int j = 0; j < PER_THREAD; j++) {
        long long l = min((long long)(tid + j * THREADS), n - 1);
        T x = (T)((v[j] ^ flip) + add);
        if (fwd) {
            if (GATHER) buf[dbase + l] = x; else arr[base + l] = x;
        } else if (bwd) {
            if (GATHER) buf[dbase + l] = x; else arr[base - l] = x;
        } else {
            if (GATHER) buf[dbase + l] = x; else arr[general_index(h, l)] = x;
        }
    }
}

// Buffer and arrays are one non-const T* in both directions: a gather writes the buffer,
// a scatter the arrays.
#define DEFINE_PLAN(T, W)                                                                       \
    extern "C" __global__ void __launch_bounds__(THREADS)                                       \
        gather_##W(const long long* __restrict__ segs, const long long* __restrict__ groups,    \
                   int nseg, int is_float, T* __restrict__ buf, SrcTable arrays) {              \
        plan_block<T, true>(segs, groups, nseg, is_float, buf, arrays);                         \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS)                                       \
        scatter_##W(const long long* __restrict__ segs, const long long* __restrict__ groups,   \
                    int nseg, int is_float, T* __restrict__ buf, SrcTable arrays) {             \
        plan_block<T, false>(segs, groups, nseg, is_float, buf, arrays);                        \
    }

DEFINE_PLAN(unsigned char, 1)
DEFINE_PLAN(unsigned short, 2)
DEFINE_PLAN(unsigned int, 4)
DEFINE_PLAN(unsigned long long, 8)
