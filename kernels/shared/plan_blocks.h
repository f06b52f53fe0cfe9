// Copy-plan gather and scatter in blocks: the block kernel of the OpenCL backend on GPUs
// and accelerators and of the CUDA backend, written once. The OpenCL build puts
// kernels/opencl/prelude.cl and kernels/shared/segment.h before this text, the CUDA build
// kernels/cuda/prelude.cuh and segment.h; the preludes say what differs (address spaces,
// barriers, indices, vector types, how sources arrive, the block shape ELEMS and TILE).
//
// The host cuts the plan into blocks (gpubuf-core's encode.rs `encode_blocks`, ELEMS
// elements per block): segment records of SEG_WORDS words (source, offset, e0..e3,
// s0..s3, dst, negate, mode, len; dims merged where the source is dense across them) and
// `groups`, the prefix sums of the segments' block counts. One work-group (CUDA block) of
// THREADS work-items runs one table block. The work-items find the block's segment
// together (block_segment: one memory round trip for up to THREADS + 1 segments), then
// work-item 0 its first element, into local memory; each work-item then moves
// ELEMS / THREADS independent elements (t, t + THREADS, ...: coalesced), a load and a
// store each, indices advanced from the block's start rather than decomposed per element
// (in 32-bit integers where the block's offsets fit, fits_narrow; else in 64 bits).
// A linear segment's blocks are runs of ELEMS buffer elements; a rows segment's (rows of
// source stride +-1 at least ELEMS / 2 long) lie in one row each, so none takes the
// general index path. A full block inside one row of source stride +1 whose array and
// buffer ends are both 16-byte aligned moves in 16-byte vectors. Transposed segments move
// in TILE x TILE tiles through local memory. Work-items past the end of a short block or
// an edge tile are clamped onto its last element, which they move again with the same
// value, rather than masked off: PoCL runs masked stores as a read, a blend and a
// full-width write, which raced with other work-groups' stores and wrote past the end of
// the buffer. Values move as unsigned integers of the element width, so every dtype is
// bit-exact; negation flips the sign bit of floats and takes the two's complement of
// integers.

#define SEG_WORDS 14
#define MODE_TILE 1
#define MODE_ROWS 2
#define THREADS 256
#define PER_THREAD (ELEMS / THREADS)

typedef struct {
    i64 base, dbase, n, nc;
    i64 i3, i2, i1, e3, e2, e1, m3, m2, m1;
    i64 s0, s1, s2, s3;
    u64 flip, add;
    int src, fwd, bwd, til, vec, narrow;
} Header;

// Multiplier for c / e as a multiply and a shift: m = ceil(2^31 / e) (below 2^32), and
// c * m >> 31 = c / e for c < 2 * ELEMS (m * e - 2^31 < e <= 2^31 / (2 * ELEMS)); 0 when
// e >= ELEMS, where the dividends met are below 2 * e and the quotient is a comparison.
DEVICE_FN i64 magic(i64 e) {
    return e < ELEMS ? (i64)((((u64)1 << 31) + (u64)e - 1) / (u64)e) : 0;
}

DEVICE_FN i64 small_div(i64 c, i64 e, i64 m) {
    return m ? (i64)(((u64)c * (u64)m) >> 31) : (i64)(c >= e);
}

// small_div in 32 bits: c * m >> 31 is the high word of (2 c) * m.
DEVICE_FN int narrow_div(int c, int e, u32 m) {
    return m ? (int)MUL_HI((u32)c << 1, m) : (int)(c >= e);
}

// The segment of block g: the last k with groups[k] <= g (groups has nseg + 1 entries,
// groups[nseg] past every block). All THREADS work-items search together: each round
// tests THREADS evenly spaced entries of the range left, so a round is one memory round
// trip and a table of up to THREADS + 1 segments takes one round (one work-item's binary
// search took one dependent load per halving). Exactly one work-item sees the boundary
// (its entry <= g, the next one > g) and writes the new range. Every work-item of the
// group calls it (it has barriers); `range` is two ints of local memory.
DEVICE_FN int block_segment(GLOBAL const i64* RESTRICT groups, int nseg, i64 g, LOCAL_PTR int* range) {
    const int tid = LOCAL_ID();
    if (tid == 0) {
        range[0] = 0;
        range[1] = nseg;
    }
    BARRIER();
    int lo = range[0], hi = range[1];
    while (hi - lo > 1) {
        const i64 step = ((i64)(hi - lo) + THREADS - 1) / THREADS;
        const i64 c = lo + (i64)tid * step;
        BARRIER(); /* every work-item has read the range before it changes */
        if (c < hi && groups[c] <= g) {
            const i64 next = min(c + step, (i64)hi);
            if (next == hi || groups[next] > g) {
                range[0] = (int)c;
                range[1] = (int)next;
            }
        }
        BARRIER();
        lo = range[0];
        hi = range[1];
    }
    return lo;
}

// a / b for 0 <= a, 0 < b: a 32-bit division where both fit (a 64-bit one is a long
// software routine on GPUs).
DEVICE_FN i64 qdiv(i64 a, i64 b) {
    return ((u64)(a | b) >> 32) == 0 ? (i64)((u32)a / (u32)b) : a / b;
}

// The bound on a block's reach below which it takes narrow_index: 2^31, or what the host
// defines before this text (the OpenCL backend defines 0, no block narrow, when asked to:
// its tests then run general_index on every block).
#ifndef NARROW_REACH
#define NARROW_REACH ((u64)1 << 31)
#endif

// Whether general_index's work fits 32-bit integers (narrow_index): extents below 2^30,
// strides below 2^31 in size, and every element's offset from the block's base below
// NARROW_REACH. The carries of a block's elements are at most q3 = (e3 + ELEMS - 2) / e3
// into dim 2, q2 = (e2 - 1 + q3) / e2 into dim 1 and q1 = (e1 - 1 + q2) / e1 into dim 0; an
// index of dims 3 to 1 moves by less than its extent (not at all without a carry into it),
// so the offset is at most (e3 - 1) |s3| + (q3 ? e2 - 1 : 0) |s2| + (q2 ? e1 - 1 : 0) |s1| +
// q1 |s0|, and so is every partial sum of narrow_index's.
DEVICE_FN int fits_narrow(i64 e1, i64 e2, i64 e3, i64 s0, i64 s1, i64 s2, i64 s3) {
    const i64 lim = (i64)1 << 30, slim = (i64)1 << 31;
    if (e1 < 1 || e2 < 1 || e3 < 1 || e1 >= lim || e2 >= lim || e3 >= lim) return 0;
    if (s0 <= -slim || s0 >= slim || s1 <= -slim || s1 >= slim || s2 <= -slim || s2 >= slim ||
        s3 <= -slim || s3 >= slim)
        return 0;
    i64 q3 = qdiv(e3 + ELEMS - 2, e3);
    i64 q2 = qdiv(e2 - 1 + q3, e2);
    i64 q1 = qdiv(e1 - 1 + q2, e1);
    u64 a0 = (u64)(s0 < 0 ? -s0 : s0), a1 = (u64)(s1 < 0 ? -s1 : s1);
    u64 a2 = (u64)(s2 < 0 ? -s2 : s2), a3 = (u64)(s3 < 0 ? -s3 : s3);
    u64 reach = (u64)(e3 - 1) * a3 + (u64)(q3 ? e2 - 1 : 0) * a2 + (u64)(q2 ? e1 - 1 : 0) * a1 +
                (u64)q1 * a0;
    return reach < (u64)NARROW_REACH;
}

// Fills the header of block g, of segment k, but its `vec` (which needs the sources'
// addresses, see PLAN_BLOCKS). `buf_off` is the buffer's element offset.
DEVICE_FN void block_header(LOCAL_PTR Header* h, GLOBAL const i64* RESTRICT segs,
                            GLOBAL const i64* RESTRICT groups, int k, int is_float, int width,
                            i64 buf_off) {
    i64 g = GROUP_ID();
    GLOBAL const i64* seg = segs + (i64)k * SEG_WORDS;
    i64 e1 = seg[3], e2 = seg[4], e3 = seg[5];
    i64 s0 = seg[6], s1 = seg[7], s2 = seg[8], s3 = seg[9];
    i64 b = g - groups[k];
    int neg = seg[11] != 0;
    i64 len = seg[13];
    u64 sign = (u64)1 << (8 * width - 1);
    h->flip = neg ? (is_float ? sign : ~(u64)0) : 0;
    h->add = (neg && !is_float) ? 1 : 0;
    h->src = (int)seg[0];
    h->s0 = s0;
    h->s1 = s1;
    h->s2 = s2;
    h->s3 = s3;
    h->e3 = e3;
    h->e2 = e2;
    h->e1 = e1;
    h->fwd = h->bwd = h->til = h->vec = h->narrow = 0;
    if (seg[12] == MODE_TILE) {
        i64 ct = (e3 + TILE - 1) / TILE;
        i64 rt = (e2 + TILE - 1) / TILE;
        i64 q = qdiv(b, ct);
        i64 cb = b - q * ct;
        b = q;
        q = qdiv(b, rt);
        i64 rb = b - q * rt;
        b = q;
        q = qdiv(b, e1);
        i64 i1 = b - q * e1, i0 = q;
        i64 q0 = rb * TILE, c0 = cb * TILE;
        h->base = seg[1] + i0 * s0 + i1 * s1 + q0 * s2 + c0 * s3;
        h->dbase = buf_off + seg[10] + ((i0 * e1 + i1) * e2 + q0) * e3 + c0;
        h->n = min((i64)TILE, e2 - q0);
        h->nc = min((i64)TILE, e3 - c0);
        h->til = 1;
        return;
    }
    if (seg[12] == MODE_ROWS) {
        // Blocks of one row each (source stride +-1 on dim 3): ceil(e3 / ELEMS) per row,
        // the last one of a row ending at the row's end.
        i64 per = (e3 + ELEMS - 1) / ELEMS;
        i64 r = qdiv(b, per);
        i64 j = b - r * per;
        i64 start = e3 >= ELEMS ? min(j * ELEMS, e3 - ELEMS) : 0;
        i64 q = qdiv(r, e2);
        i64 i2 = r - q * e2;
        i64 i0 = qdiv(q, e1);
        i64 i1 = q - i0 * e1;
        h->base = seg[1] + i0 * s0 + i1 * s1 + i2 * s2 + start * s3;
        h->dbase = buf_off + seg[10] + r * e3 + start;
        h->n = min((i64)ELEMS, e3);
        h->fwd = s3 == 1;
        h->bwd = s3 == -1;
        return;
    }
    // ELEMS elements from `start`; the last block of a segment ends at its end.
    i64 start = len >= ELEMS ? min(b * ELEMS, len - ELEMS) : 0;
    i64 r = qdiv(start, e3);
    i64 i3 = start - r * e3;
    i64 q = qdiv(r, e2);
    i64 i2 = r - q * e2;
    i64 i0 = qdiv(q, e1);
    i64 i1 = q - i0 * e1;
    h->base = seg[1] + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3;
    h->dbase = buf_off + seg[10] + start;
    h->n = min((i64)ELEMS, len);
    int row = len >= ELEMS && i3 + ELEMS <= e3;
    h->fwd = row && s3 == 1;
    h->bwd = row && s3 == -1;
    h->i3 = i3;
    h->i2 = i2;
    h->i1 = i1;
    h->m3 = magic(e3);
    h->m2 = magic(e2);
    h->m1 = magic(e1);
    h->narrow = fits_narrow(e1, e2, e3, s0, s1, s2, s3);
}

// The source index of the block's element l, carried over the extents from its first,
// relative to the first's (h->base).
DEVICE_FN i64 general_index(LOCAL_PTR const Header* h, i64 l) {
    i64 c3 = h->i3 + l;
    i64 q3 = small_div(c3, h->e3, h->m3);
    i64 c2 = h->i2 + q3;
    i64 q2 = small_div(c2, h->e2, h->m2);
    i64 c1 = h->i1 + q2;
    i64 q1 = small_div(c1, h->e1, h->m1);
    return (c3 - q3 * h->e3 - h->i3) * h->s3 + (c2 - q2 * h->e2 - h->i2) * h->s2 +
           (c1 - q1 * h->e1 - h->i1) * h->s1 + q1 * h->s0;
}

// general_index in 32-bit integers, for a block whose header says `narrow` (fits_narrow:
// every carry, quotient, product and the offset from the base fit): about half the
// instructions of the 64-bit carries on a GPU (sm_90: 728 against 1 392 for a work-item's
// 16 loads and 16 stores).
DEVICE_FN int narrow_index(LOCAL_PTR const Header* h, int l) {
    const int e3 = (int)h->e3, e2 = (int)h->e2, e1 = (int)h->e1;
    const int i3 = (int)h->i3, i2 = (int)h->i2, i1 = (int)h->i1;
    int c3 = i3 + l;
    int q3 = narrow_div(c3, e3, (u32)h->m3);
    int c2 = i2 + q3;
    int q2 = narrow_div(c2, e2, (u32)h->m2);
    int c1 = i1 + q2;
    int q1 = narrow_div(c1, e1, (u32)h->m1);
    return (c3 - q3 * e3 - i3) * (int)h->s3 + (c2 - q2 * e2 - i2) * (int)h->s2 +
           (c1 - q1 * e1 - i1) * (int)h->s1 + q1 * (int)h->s0;
}

// The loads and stores of a block that takes an index function (general_index or
// narrow_index, an offset from `ab`, the block's first array element) for the array side:
// all loads first, then all stores (PLAN_BLOCKS).
#define INDEXED_MOVES(INDEX, T, GATHER, H)                                                       \
    UNROLL                                                                                       \
    for (int j = 0; j < PER_THREAD; j++) {                                                       \
        int l = min(tid + j * THREADS, last);                                                    \
        v[j] = GATHER ? ab[INDEX(H, l)] : bp[l];                                                 \
    }                                                                                            \
    UNROLL                                                                                       \
    for (int j = 0; j < PER_THREAD; j++) {                                                       \
        int l = min(tid + j * THREADS, last);                                                    \
        T x = (T)((v[j] ^ flip) + add);                                                          \
        if (GATHER) bp[l] = x; else ab[INDEX(H, l)] = x;                                         \
    }

// The 64-bit general index path of PLAN_BLOCKS, a function of its own that is not inlined:
// inlined, its registers made the 32-bit path beside it spill on CUDA.
#define WIDE_MOVES(NAME, T, W, GATHER)                                                           \
    NOINLINE_FN void NAME##_wide_##W(LOCAL_PTR const Header* hp, GLOBAL T* ab, GLOBAL T* bp,     \
                                     int tid, int last, T flip, T add) {                         \
        T v[PER_THREAD];                                                                         \
        INDEXED_MOVES(general_index, T, GATHER, hp)                                              \
    }

// One kernel per direction and width: GATHER is 1 (array -> buffer) or 0 (buffer ->
// array); VT is the 16-byte vector of T, NV the vectors in a block, VPT per work-item.
// Buffer and arrays are one non-const T* in both directions: a gather writes the buffer,
// a scatter the arrays.
#define PLAN_BLOCKS(NAME, T, W, GATHER)                                                          \
    BLOCK_KERNEL NAME##_##W(GLOBAL const i64* RESTRICT segs, GLOBAL const i64* RESTRICT groups,  \
                            int nseg, int is_float, GLOBAL T* RESTRICT buf PLAN_SOURCES(T)) {    \
        LOCAL_VAR Header h;                                                                      \
        LOCAL_VAR T tile[TILE * (TILE + 1)];                                                     \
        LOCAL_VAR int range[2];                                                                  \
        const int k = block_segment(groups, nseg, GROUP_ID(), range);                            \
        if (LOCAL_ID() == 0) {                                                                   \
            block_header(&h, segs, groups, k, is_float, W, BUF_OFF);                             \
            u64 ends = (SRC_BYTE(h.src, W) + (u64)h.base * W) | (BUF_BYTE + (u64)h.dbase * W);   \
            h.vec = h.fwd && h.n == ELEMS && (ends & 15) == 0;                                   \
        }                                                                                        \
        BARRIER();                                                                               \
        GLOBAL T* arr = 0;                                                                       \
        SRC_PICK(h.src, arr);                                                                    \
        const T flip = (T)h.flip, add = (T)h.add;                                                \
        const i64 base = h.base, dbase = h.dbase;                                                \
        const int tid = LOCAL_ID();                                                              \
        if (h.til) {                                                                             \
            /* The tile is [column (dim 3)][row (dim 2)]: rows are contiguous in the array,   */ \
            /* columns in the buffer; a is a row < n, b a column < nc.                         */ \
            const int n = (int)h.n, nc = (int)h.nc;                                              \
            UNROLL                                                                               \
            for (int j = tid / TILE; j < TILE; j += THREADS / TILE) {                            \
                if (GATHER) {                                                                    \
                    int a = min(tid % TILE, n - 1), b = min(j, nc - 1);                          \
                    tile[b * (TILE + 1) + a] = arr[base + a * h.s2 + b * h.s3];                  \
                } else {                                                                         \
                    int a = min(j, n - 1), b = min(tid % TILE, nc - 1);                          \
                    tile[b * (TILE + 1) + a] = buf[dbase + a * h.e3 + b];                        \
                }                                                                                \
            }                                                                                    \
            BARRIER();                                                                           \
            UNROLL                                                                               \
            for (int j = tid / TILE; j < TILE; j += THREADS / TILE) {                            \
                if (GATHER) {                                                                    \
                    int a = min(j, n - 1), b = min(tid % TILE, nc - 1);                          \
                    buf[dbase + a * h.e3 + b] = (T)((tile[b * (TILE + 1) + a] ^ flip) + add);    \
                } else {                                                                         \
                    int a = min(tid % TILE, n - 1), b = min(j, nc - 1);                          \
                    arr[base + a * h.s2 + b * h.s3] = (T)((tile[b * (TILE + 1) + a] ^ flip) + add); \
                }                                                                                \
            }                                                                                    \
        } else if (h.vec) {                                                                      \
            /* Both ends 16-byte aligned (checked above): NV vectors per block. */               \
            GLOBAL VEC_##W* va = (GLOBAL VEC_##W*)(arr + base);                                  \
            GLOBAL VEC_##W* vb = (GLOBAL VEC_##W*)(buf + dbase);                                 \
            VEC_##W x[(ELEMS * W / 16 + THREADS - 1) / THREADS];                                 \
            UNROLL                                                                               \
            for (int j = 0; j < (ELEMS * W / 16 + THREADS - 1) / THREADS; j++) {                 \
                int q = min(tid + j * THREADS, ELEMS * W / 16 - 1);                              \
                x[j] = GATHER ? va[q] : vb[q];                                                   \
            }                                                                                    \
            UNROLL                                                                               \
            for (int j = 0; j < (ELEMS * W / 16 + THREADS - 1) / THREADS; j++) {                 \
                int q = min(tid + j * THREADS, ELEMS * W / 16 - 1);                              \
                VEC_##W y = VNEG(x[j], flip, add);                                               \
                if (GATHER) vb[q] = y; else va[q] = y;                                           \
            }                                                                                    \
        } else {                                                                                 \
/* The buffer side moves forwards; the array side forwards or backwards (one    */ \
            /* row) or by the general index. The case is chosen once per block, outside    */ \
            /* the loops; all loads first, then all stores: PER_THREAD moves in flight.    */ \
            const int last = (int)h.n - 1;                                                       \
            GLOBAL T* bp = buf + dbase;                                                          \
            T v[PER_THREAD];                                                                     \
            if (h.fwd || h.bwd) {                                                                \
                const int dir = h.fwd ? 1 : -1;                                                  \
                GLOBAL T* ap = arr + base;                                                       \
                UNROLL                                                                           \
                for (int j = 0; j < PER_THREAD; j++) {                                           \
                    int l = min(tid + j * THREADS, last);                                        \
                    v[j] = GATHER ? ap[dir * l] : bp[l];                                         \
                }                                                                                \
                UNROLL                                                                           \
                for (int j = 0; j < PER_THREAD; j++) {                                           \
                    int l = min(tid + j * THREADS, last);                                        \
                    T x = (T)((v[j] ^ flip) + add);                                              \
                    if (GATHER) bp[l] = x; else ap[dir * l] = x;                                 \
                }                                                                                \
            } else if (h.narrow) {                                                               \
                GLOBAL T* ab = arr + base;                                                       \
                INDEXED_MOVES(narrow_index, T, GATHER, &h)                                       \
            } else {                                                                             \
                NAME##_wide_##W(&h, arr + base, bp, tid, last, flip, add);                       \
            }                                                                                    \
        }                                                                                        \
    }

#define DEFINE_PLAN(T, W)                                                                        \
    WIDE_MOVES(gather, T, W, 1)                                                                  \
    WIDE_MOVES(scatter, T, W, 0)                                                                 \
    PLAN_BLOCKS(gather, T, W, 1)                                                                 \
    PLAN_BLOCKS(scatter, T, W, 0)

DEFINE_PLAN(u8, 1)
DEFINE_PLAN(u16, 2)
DEFINE_PLAN(u32, 4)
DEFINE_PLAN(u64, 8)
