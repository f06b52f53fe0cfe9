// Copy-plan gather and scatter in blocks, for OpenCL GPU and accelerator devices (CPU
// devices run kernels/opencl/plan.cl, one run of CHUNK elements per work-item).
//
// The host prepends the prelude of plan.cl (SRC_PARAMS, SRC_PICK; CHUNK is unused here)
// and cuts the plan into blocks (gpubuf-core's encode.rs `encode_blocks`, ELEMS elements
// per block): segment records of SEG_WORDS longs (source, offset, e0..e3, s0..s3, dst,
// negate, mode, len; dims merged where the source is dense across them) and `groups`, the
// prefix sums of the segments' block counts. One work-group of THREADS work-items runs one
// block. Work-item 0 finds the block's segment (one binary search) and its first element
// once, into local memory; each work-item then moves ELEMS / THREADS independent elements
// (t, t + THREADS, ...: coalesced), a load and a store each, indices advanced from the
// block's start rather than decomposed per element. A block inside one row of source
// stride +1 whose array and buffer ends are both 16-byte aligned moves in 16-byte vectors.
// Transposed segments move in TILE x TILE tiles through local memory. Work-items past the
// end of a short block or an edge tile are clamped onto its last element, which they move
// again with the same value, rather than masked off: PoCL runs masked stores as a read,
// a blend and a full-width write, which raced with other work-groups' stores and wrote
// past the end of the buffer. Values move as
// unsigned integers of the element width, so every dtype is bit-exact; negation flips
// the sign bit of floats and takes the two's complement of integers.
//
// kernels/cuda/plan.cu is the same algorithm; a change to one is made to both.

#define SEG_WORDS 14
#define MODE_TILE 1
#define THREADS 256
#define ELEMS 1024
#define TILE 32
#define PER_THREAD (ELEMS / THREADS)

typedef struct {
    long base, dbase, n, nc;
    long i3, i2, i1, e3, e2, e1, m3, m2, m1;
    long s0, s1, s2, s3;
    ulong flip, add;
    int src, fwd, bwd, til, vec;
} Header;

inline int find_segment(__global const long* groups, int nseg, long g) {
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
inline long magic(long e) {
    return e < ELEMS ? (long)((((ulong)1 << 32) + (ulong)e - 1) / (ulong)e) : 0;
}

inline long small_div(long c, long e, long m) {
    return m ? (long)(((ulong)c * (ulong)m) >> 32) : (long)(c >= e);
}

// Fills the header of this work-group's block. `buf_off` is the buffer's element offset
// in its allocation, `offs[slot]` each source's; OpenCL aligns every buffer to at least
// 64 bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN is at least the size of a long16), so 16-byte
// alignment is a property of the element offsets.
inline void block_header(__local Header* h, __global const long* segs, __global const long* groups,
                         int nseg, int is_float, int width, long buf_off, __global const long* offs) {
    long g = get_group_id(0);
    int k = find_segment(groups, nseg, g);
    __global const long* seg = segs + (long)k * SEG_WORDS;
    long e1 = seg[3], e2 = seg[4], e3 = seg[5];
    long s0 = seg[6], s1 = seg[7], s2 = seg[8], s3 = seg[9];
    long b = g - groups[k];
    int neg = seg[11] != 0;
    long len = seg[13];
    ulong sign = (ulong)1 << (8 * width - 1);
    h->flip = neg ? (is_float ? sign : ~(ulong)0) : 0;
    h->add = (neg && !is_float) ? 1 : 0;
    h->src = (int)seg[0];
    h->s0 = s0;
    h->s1 = s1;
    h->s2 = s2;
    h->s3 = s3;
    h->e3 = e3;
    h->e2 = e2;
    h->e1 = e1;
    h->fwd = h->bwd = h->til = h->vec = 0;
    if (seg[12] == MODE_TILE) {
        long ct = (e3 + TILE - 1) / TILE;
        long rt = (e2 + TILE - 1) / TILE;
        long cb = b % ct;
        b /= ct;
        long rb = b % rt;
        b /= rt;
        long i1 = b % e1, i0 = b / e1;
        long q0 = rb * TILE, c0 = cb * TILE;
        h->base = seg[1] + i0 * s0 + i1 * s1 + q0 * s2 + c0 * s3;
        h->dbase = buf_off + seg[10] + ((i0 * e1 + i1) * e2 + q0) * e3 + c0;
        h->n = min((long)TILE, e2 - q0);
        h->nc = min((long)TILE, e3 - c0);
        h->til = 1;
        return;
    }
    // ELEMS elements from `start`; the last block of a segment ends at its end.
    long start = len >= ELEMS ? min(b * ELEMS, len - ELEMS) : 0;
    long i3 = start % e3, r = start / e3;
    long i2 = r % e2;
    r /= e2;
    long i1 = r % e1, i0 = r / e1;
    h->base = seg[1] + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3;
    h->dbase = buf_off + seg[10] + start;
    h->n = min((long)ELEMS, len);
    int row = len >= ELEMS && i3 + ELEMS <= e3;
    h->fwd = row && s3 == 1;
    h->bwd = row && s3 == -1;
    h->vec = h->fwd && ((offs[h->src] + h->base) * width) % 16 == 0 && (h->dbase * width) % 16 == 0;
    h->i3 = i3;
    h->i2 = i2;
    h->i1 = i1;
    h->m3 = magic(e3);
    h->m2 = magic(e2);
    h->m1 = magic(e1);
}

// The source index of the block's element l, carried over the extents from its first.
inline long general_index(__local const Header* h, long l) {
    long c3 = h->i3 + l;
    long q3 = small_div(c3, h->e3, h->m3);
    long c2 = h->i2 + q3;
    long q2 = small_div(c2, h->e2, h->m2);
    long c1 = h->i1 + q2;
    long q1 = small_div(c1, h->e1, h->m1);
    return h->base + (c3 - q3 * h->e3 - h->i3) * h->s3 + (c2 - q2 * h->e2 - h->i2) * h->s2 +
           (c1 - q1 * h->e1 - h->i1) * h->s1 + q1 * h->s0;
}

// One kernel per direction and width: GATHER is 1 (array -> buffer) or 0 (buffer ->
// array); VT is the 16-byte vector of T, NV the vectors in a block, VPT per work-item.
#define PLAN_BLOCKS(NAME, T, W, VT, NV, VPT, GATHER)                                            \
    __kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void NAME##_##W(              \
        __global const long* segs, __global const long* groups, int nseg, int is_float,        \
        __global T* buf, long buf_off, __global const long* offs SRC_PARAMS(T)) {              \
        __local Header h;                                                                       \
        __local T tile[TILE * (TILE + 1)];                                                      \
        if (get_local_id(0) == 0) block_header(&h, segs, groups, nseg, is_float, W, buf_off, offs); \
        barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        __global T* arr = 0;                                                                    \
        SRC_PICK(h.src, arr);                                                                   \
        const T flip = (T)h.flip, add = (T)h.add;                                               \
        const long base = h.base, dbase = h.dbase;                                              \
        const int tid = get_local_id(0);                                                        \
        if (h.til) {                                                                            \
            const int n = h.n, nc = h.nc;                                                       \
            for (int j = tid / TILE; j < TILE; j += THREADS / TILE) {                           \
                /* Array side: row a < n (dim 2, contiguous in the array), column b < nc. */    \
                int a = min(tid % TILE, n - 1), b = min(j, nc - 1);                             \
                if (GATHER) {                                                                   \
                    tile[b * (TILE + 1) + a] = arr[base + a * h.s2 + b * h.s3];                 \
                } else {                                                                        \
                    /* Buffer side: row a < n, column b < nc (contiguous in the buffer). */     \
                    a = min(j, n - 1);                                                          \
                    b = min(tid % TILE, nc - 1);                                                \
                    tile[b * (TILE + 1) + a] = buf[dbase + a * h.e3 + b];                       \
                }                                                                               \
            }                                                                                   \
            barrier(CLK_LOCAL_MEM_FENCE);                                                       \
            for (int j = tid / TILE; j < TILE; j += THREADS / TILE) {                           \
                if (GATHER) {                                                                   \
                    int a = min(j, n - 1), b = min(tid % TILE, nc - 1);                         \
                    buf[dbase + a * h.e3 + b] = (T)((tile[b * (TILE + 1) + a] ^ flip) + add);   \
                } else {                                                                        \
                    int a = min(tid % TILE, n - 1), b = min(j, nc - 1);                         \
                    arr[base + a * h.s2 + b * h.s3] = (T)((tile[b * (TILE + 1) + a] ^ flip) + add); \
                }                                                                               \
            }                                                                                   \
        } else if (h.vec) {                                                                     \
            __global VT* va = (__global VT*)(arr + base);                                       \
            __global VT* vb = (__global VT*)(buf + dbase);                                      \
            VT x[VPT];                                                                          \
            for (int j = 0; j < VPT; j++) {                                                     \
                int q = min(tid + j * THREADS, NV - 1);                                         \
                x[j] = GATHER ? va[q] : vb[q];                                                  \
            }                                                                                   \
            for (int j = 0; j < VPT; j++) {                                                     \
                int q = min(tid + j * THREADS, NV - 1);                                         \
                VT y = (x[j] ^ flip) + add;                                                     \
                if (GATHER) vb[q] = y; else va[q] = y;                                          \
            }                                                                                   \
        } else {                                                                                \
            const int fwd = h.fwd, bwd = h.bwd;                                                 \
            const long n = h.n;                                                                 \
            T v[PER_THREAD];                                                                    \
            /* All loads first, then all stores: PER_THREAD independent moves in flight. */    \
            for (int j = 0; j < PER_THREAD; j++) {                                              \
                long l = min((long)(tid + j * THREADS), n - 1);                                 \
                if (fwd) {                                                                      \
                    v[j] = GATHER ? arr[base + l] : buf[dbase + l];                             \
                } else if (bwd) {                                                               \
                    v[j] = GATHER ? arr[base - l] : buf[dbase + l];                             \
                } else {                                                                        \
                    v[j] = GATHER ? arr[general_index(&h, l)] : buf[dbase + l];                 \
                }                                                                               \
            }                                                                                   \
            for (int j = 0; j < PER_THREAD; j++) {                                              \
                long l = min((long)(tid + j * THREADS), n - 1);                                 \
                T x = (T)((v[j] ^ flip) + add);                                                 \
                if (fwd) {                                                                      \
                    if (GATHER) buf[dbase + l] = x; else arr[base + l] = x;                     \
                } else if (bwd) {                                                               \
                    if (GATHER) buf[dbase + l] = x; else arr[base - l] = x;                     \
                } else {                                                                        \
                    if (GATHER) buf[dbase + l] = x; else arr[general_index(&h, l)] = x;         \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }

#define DEFINE_PLAN(T, W, VT, NV, VPT)                                                          \
    PLAN_BLOCKS(gather, T, W, VT, NV, VPT, 1)                                                   \
    PLAN_BLOCKS(scatter, T, W, VT, NV, VPT, 0)

// NV = ELEMS * W / 16 vectors per block; VPT = NV / THREADS rounded up.
DEFINE_PLAN(uchar, 1, uchar16, 64, 1)
DEFINE_PLAN(ushort, 2, ushort8, 128, 1)
DEFINE_PLAN(uint, 4, uint4, 256, 1)
DEFINE_PLAN(ulong, 8, ulong2, 512, 2)
