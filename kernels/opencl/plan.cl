// Copy-plan gather and scatter for gpubuf's OpenCL backend.
//
// The host prepends a prelude that defines:
//   SRC_PARAMS(T)  ", __global T* s0, __global T* s1, ..." (one per source slot)
//   SRC_PICK(i, p) sets pointer p to source slot i plus offs[i], the slot's element offset
//                  in its allocation (offs is a small buffer the host caches per plan)
//   GROUP          work-items per work-group (the launch's local size), a power of four
//   TILE           side of a transposed segment's tile, TILE * TILE == GROUP
// One program per number of source slots; it holds a gather and a scatter kernel per
// element width (1, 2, 4, 8 bytes). Values move as unsigned integers of the width, so
// every dtype is copied bit-exactly; negation flips the sign bit of floats and takes the
// two's complement of integers (the same rule as DType::negate_bytes on the host).
//
// Segment record (SEG_WORDS longs, gpubuf-core's encode.rs `encode_blocks`): source,
// offset, e0..e3, s0..s3, dst, negate, mode, len; dims already merged where the source
// is dense across them. groups[k] is the first work-group of segment k. Each work-group
// moves one block: GROUP consecutive buffer elements of a linear segment (the last block
// shifted back to end at the segment's end, so no block is partial unless the whole
// segment is shorter than GROUP), or a TILE x TILE tile of a transposed segment.
// Work-item 0 finds the segment (one binary search) and the block's first element once,
// into local memory; then every work-item moves one element: a load and a store, the
// source index advanced from the block's start, never decomposed from scratch.

#define SEG_WORDS 14
#define MODE_LINEAR 0
#define MODE_TILE 1

// A block takes one path, chosen once by work-item 0 (H_FWD, H_BWD, H_TIL; else the
// general path): one row of source stride +1 (src = base + lid) or -1 (src = base - lid),
// a tile through local memory, or rows of any stride and length, with each work-item's
// indices carried from the block's first element. Each path opens with a barrier inside
// its (uniform) branch, so PoCL runs it as its own loop over the work-items.

// Block header words.
#define H_BASE 0
#define H_DBASE 1
#define H_N 3
#define H_NC 4
#define H_I3 5
#define H_I2 6
#define H_I1 7
#define H_E3 8
#define H_E2 9
#define H_E1 10
#define H_M3 11
#define H_M2 12
#define H_M1 13
#define H_S0 14
#define H_S1 15
#define H_S2 16
#define H_S3 17
#define H_FLIP 18
#define H_ADD 19
#define H_FWD 20
#define H_BWD 21
#define H_TIL 22
#define H_WORDS 23

// The segment holding work-group g: the last k with groups[k] <= g. A fixed number of
// unrolled steps, no loop: a loop here would keep PoCL from running the work-items of a
// block as one vectorised loop.
#define FIND_STEP(step)                                                                        \
    {                                                                                          \
        int mid = lo + (step);                                                                 \
        int at = mid < nseg ? mid : nseg - 1;                                                  \
        lo = ((mid < nseg) & (groups[at] <= g)) ? mid : lo;                                    \
    }

inline int find_segment(__global const long* groups, int nseg, long g) {
    int lo = 0;
    FIND_STEP(1073741824) FIND_STEP(536870912) FIND_STEP(268435456) FIND_STEP(134217728)
    FIND_STEP(67108864) FIND_STEP(33554432) FIND_STEP(16777216) FIND_STEP(8388608)
    FIND_STEP(4194304) FIND_STEP(2097152) FIND_STEP(1048576) FIND_STEP(524288)
    FIND_STEP(262144) FIND_STEP(131072) FIND_STEP(65536) FIND_STEP(32768)
    FIND_STEP(16384) FIND_STEP(8192) FIND_STEP(4096) FIND_STEP(2048)
    FIND_STEP(1024) FIND_STEP(512) FIND_STEP(256) FIND_STEP(128)
    FIND_STEP(64) FIND_STEP(32) FIND_STEP(16) FIND_STEP(8)
    FIND_STEP(4) FIND_STEP(2) FIND_STEP(1)
    return lo;
}

// Multiplier for dividing by e with a multiply and a shift, exact for dividends below
// 2 * GROUP (GROUP <= 4096, so dividend * e < 2^32); 0 when e >= GROUP, where the
// dividends met are below 2 * e and the quotient is a comparison.
inline long magic(long e) {
    return e < GROUP ? (long)((((ulong)1 << 32) + (ulong)e - 1) / (ulong)e) : 0;
}

// c / e for c < e + GROUP, with m = magic(e).
inline long small_div(long c, long e, long m) {
    return m ? (long)(((ulong)c * (ulong)m) >> 32) : (long)(c >= e);
}

// Fills the block header of this work-group. Straight-line code (selects, no branches or
// loops): PoCL turns a work-group into loops over its work-items between barriers, and
// control flow in work-item 0's part keeps the other parts from vectorising.
inline int block_header(__local long* h, __global const long* segs, __global const long* groups,
                         int nseg, long buf_off, int is_float, int width) {
    long g = get_group_id(0);
    int k = find_segment(groups, nseg, g);
    __global const long* seg = segs + (long)k * SEG_WORDS;
    long e1 = seg[3], e2 = seg[4], e3 = seg[5];
    long s0 = seg[6], s1 = seg[7], s2 = seg[8], s3 = seg[9];
    long b = g - groups[k];
    long neg = seg[11] != 0;
    long tiled = seg[12] == MODE_TILE;
    long len = seg[13];
    long sign = (long)1 << (8 * width - 1);
    h[H_FLIP] = neg * (is_float ? sign : -1);
    h[H_ADD] = neg & !is_float;
    h[H_S0] = s0;
    h[H_S1] = s1;
    h[H_S2] = s2;
    h[H_S3] = s3;
    h[H_E3] = e3;
    h[H_E2] = e2;
    h[H_E1] = e1;
    // A tile: block b is tile (i0, i1, rows q0.., columns c0..).
    long ct = (e3 + TILE - 1) / TILE;
    long rt = (e2 + TILE - 1) / TILE;
    long cb = b % ct;
    long tr = b / ct;
    long rb = tr % rt;
    tr /= rt;
    long q0 = rb * TILE, c0 = cb * TILE;
    // A linear block: GROUP elements from `start`, decomposed over the extents.
    long start = len >= GROUP ? min(b * GROUP, len - GROUP) : 0;
    long i3 = start % e3;
    long r = start / e3;
    long i2 = r % e2;
    r /= e2;
    i3 = tiled ? c0 : i3;
    i2 = tiled ? q0 : i2;
    r = tiled ? tr : r;
    long i1 = r % e1;
    long i0 = r / e1;
    h[H_BASE] = seg[1] + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3;
    long first = tiled ? ((i0 * e1 + i1) * e2 + q0) * e3 + c0 : start;
    h[H_DBASE] = buf_off + seg[10] + first;
    h[H_N] = tiled ? min((long)TILE, e2 - q0) : min((long)GROUP, len);
    h[H_NC] = min((long)TILE, e3 - c0);
    long row = !tiled & (len >= GROUP) & (i3 + GROUP <= e3);
    h[H_FWD] = row & (s3 == 1);
    h[H_BWD] = row & (s3 == -1);
    h[H_TIL] = tiled;
    h[H_I3] = i3;
    h[H_I2] = i2;
    h[H_I1] = i1;
    h[H_M3] = magic(e3);
    h[H_M2] = magic(e2);
    h[H_M1] = magic(e1);
    return k;
}

// Gather: array -> buffer; scatter: buffer -> array. ARR and BUF are the two lvalues.
#define MOVE_1(T, ARR, BUF) { T v = (ARR); BUF = (T)((v ^ flip) + add); }
#define MOVE_0(T, ARR, BUF) { T v = (BUF); ARR = (T)((v ^ flip) + add); }

// The source index of the block's element lid, carried over the extents from the block's
// first element (i3, i2, i1 in the header; each carry a multiply-and-shift division).
#define GENERAL_INDEX                                                                           \
    long c3 = h[H_I3] + lid;                                                                    \
    long q3 = small_div(c3, h[H_E3], h[H_M3]);                                                  \
    long c2 = h[H_I2] + q3;                                                                     \
    long q2 = small_div(c2, h[H_E2], h[H_M2]);                                                  \
    long c1 = h[H_I1] + q2;                                                                     \
    long q1 = small_div(c1, h[H_E1], h[H_M1]);                                                  \
    long idx = base + (c3 - q3 * h[H_E3] - h[H_I3]) * h[H_S3] +                                 \
               (c2 - q2 * h[H_E2] - h[H_I2]) * h[H_S2] + (c1 - q1 * h[H_E1] - h[H_I1]) * h[H_S1] + \
               q1 * h[H_S0];

// Transposed tiles: the array side is contiguous along dim 2 (a = lid % TILE), the
// buffer side along dim 3; the tile in local memory turns one into the other.
#define TILE_IN_1(T) tile[tb * (TILE + 1) + ta] = arr[base + ta * h[H_S2] + tb * h[H_S3]];
#define TILE_OUT_1(T)                                                                           \
    { T v = tile[ta * (TILE + 1) + tb]; buf[dbase + tb * h[H_E3] + ta] = (T)((v ^ flip) + add); }
#define TILE_IN_0(T) tile[ta * (TILE + 1) + tb] = buf[dbase + tb * h[H_E3] + ta];
#define TILE_OUT_0(T)                                                                           \
    { T v = tile[tb * (TILE + 1) + ta]; arr[base + ta * h[H_S2] + tb * h[H_S3]] = (T)((v ^ flip) + add); }

// Work-items past the end of a short block or an edge tile are clamped onto the last
// element, which they move again with the same value, instead of being masked off:
// PoCL's vectorised masked stores wrote past the end of the buffer. The array side of a
// tile has rows ta < H_N (dim 2) and columns tb < H_NC (dim 3).
#define CLAMP_ROWS(x) x = min(x, (int)h[H_N] - 1);
#define CLAMP_COLS(x) x = min(x, (int)h[H_NC] - 1);
#define TILE_CLAMP_IN_1 CLAMP_ROWS(ta) CLAMP_COLS(tb)
#define TILE_CLAMP_OUT_1 CLAMP_ROWS(tb) CLAMP_COLS(ta)
#define TILE_CLAMP_IN_0 TILE_CLAMP_OUT_1
#define TILE_CLAMP_OUT_0 TILE_CLAMP_IN_1

// The block's header in private variables, read again after each barrier so that no
// value lives across one.
#define BLOCK_VARS(T)                                                                          \
    int lid = get_local_id(0);                                                                 \
    int ta = lid % TILE, tb = lid / TILE;                                                      \
    __global T* arr = arrp[0];                                                                 \
    long base = h[H_BASE], dbase = h[H_DBASE];                                                 \
    T flip = (T)h[H_FLIP], add = (T)h[H_ADD];                                                  \


#define PLAN_KERNEL(NAME, T, W, G)                                                             \
    __kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void NAME##_##W(               \
        __global const long* segs, __global const long* groups, int nseg, int is_float,       \
        __global T* buf, long buf_off, __global const long* offs SRC_PARAMS(T)) {             \
        __local long h[H_WORDS];                                                               \
        __global T* __local arrp[1];                                                           \
        __local T tile[TILE * (TILE + 1)];                                                     \
        if (get_local_id(0) == 0) {                                                                        \
            int k = block_header(h, segs, groups, nseg, buf_off, is_float, W);                 \
            __global T* p = 0;                                                                 \
            SRC_PICK(segs[(long)k * SEG_WORDS], p);                                            \
            arrp[0] = p;                                                                       \
        }                                                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                                          \
        if (h[H_FWD]) {                                                                        \
            barrier(CLK_LOCAL_MEM_FENCE);                                                      \
            BLOCK_VARS(T)                                                                      \
            MOVE_##G(T, arr[base + lid], buf[dbase + lid]);                                    \
        } else if (h[H_BWD]) {                                                                 \
            barrier(CLK_LOCAL_MEM_FENCE);                                                      \
            BLOCK_VARS(T)                                                                      \
            MOVE_##G(T, arr[base - lid], buf[dbase + lid]);                                    \
        } else if (h[H_TIL]) {                                                                 \
            barrier(CLK_LOCAL_MEM_FENCE);                                                      \
            {                                                                                  \
                BLOCK_VARS(T)                                                                  \
                TILE_CLAMP_IN_##G                                                              \
                TILE_IN_##G(T)                                                                 \
            }                                                                                  \
            barrier(CLK_LOCAL_MEM_FENCE);                                                      \
            {                                                                                  \
                BLOCK_VARS(T)                                                                  \
                TILE_CLAMP_OUT_##G                                                             \
                TILE_OUT_##G(T)                                                                \
            }                                                                                  \
        } else {                                                                               \
            barrier(CLK_LOCAL_MEM_FENCE);                                                      \
            BLOCK_VARS(T)                                                                      \
            lid = min(lid, (int)h[H_N] - 1);                                                   \
            GENERAL_INDEX                                                                      \
            MOVE_##G(T, arr[idx], buf[dbase + lid]);                                           \
        }                                                                                      \
    }

#define DEFINE_PLAN(T, W)                                                                      \
    PLAN_KERNEL(gather, T, W, 1)                                                               \
    PLAN_KERNEL(scatter, T, W, 0)

DEFINE_PLAN(uchar, 1)
DEFINE_PLAN(ushort, 2)
DEFINE_PLAN(uint, 4)
DEFINE_PLAN(ulong, 8)
