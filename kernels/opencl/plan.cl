// Copy-plan gather and scatter for gpubuf's OpenCL backend.
//
// The host prepends a prelude that defines:
//   SRC_PARAMS(T)  ", __global T* s0, __global T* s1, ..." (one per source slot)
//   SRC_PICK(i, p) sets pointer p to source slot i plus offs[i], the slot's element offset
//                  in its allocation (offs is a small buffer the host caches per plan)
// One program per number of source slots; it holds a gather and a scatter kernel per
// element width (1, 2, 4, 8 bytes). Values move as unsigned integers of the width, so
// every dtype is copied bit-exactly; negation flips the sign bit of floats and takes the
// two's complement of integers (the same rule as DType::negate_bytes on the host).
//
// Segment record (12 longs): source, offset, e0, e1, e2, e3, s0, s1, s2, s3, dst, negate.
// starts[k] is the first work-item of segment k (prefix sums of the segment lengths).

#define SEG_WORDS 12

inline int find_segment(__global const long* starts, int nseg, long t) {
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

// Element index in the source of element l of the box described by seg (C order).
inline long box_index(__global const long* seg, long l) {
    long i3 = l % seg[5];
    l /= seg[5];
    long i2 = l % seg[4];
    l /= seg[4];
    long i1 = l % seg[3];
    long i0 = l / seg[3];
    return seg[1] + i0 * seg[6] + i1 * seg[7] + i2 * seg[8] + i3 * seg[9];
}

#define DEFINE_PLAN(T, W)                                                                    \
    inline T negate_##W(T v, int is_float) {                                                 \
        return is_float ? (T)(v ^ (T)((T)1 << (8 * sizeof(T) - 1))) : (T)((T)0 - v);        \
    }                                                                                        \
    __kernel void gather_##W(__global const long* segs, __global const long* starts,         \
                             int nseg, long total, int is_float, __global T* buf,            \
                             long buf_off, __global const long* offs SRC_PARAMS(T)) {                                   \
        long t = get_global_id(0);                                                           \
        if (t >= total) return;                                                              \
        int k = find_segment(starts, nseg, t);                                               \
        __global const long* seg = segs + (long)k * SEG_WORDS;                               \
        long l = t - starts[k];                                                              \
        __global T* src = 0;                                                                 \
        SRC_PICK(seg[0], src);                                                               \
        T v = src[box_index(seg, l)];                                                        \
        if (seg[11]) v = negate_##W(v, is_float);                                            \
        buf[buf_off + seg[10] + l] = v;                                                      \
    }                                                                                        \
    __kernel void scatter_##W(__global const long* segs, __global const long* starts,        \
                              int nseg, long total, int is_float, __global T* buf,           \
                              long buf_off, __global const long* offs SRC_PARAMS(T)) {                                  \
        long t = get_global_id(0);                                                           \
        if (t >= total) return;                                                              \
        int k = find_segment(starts, nseg, t);                                               \
        __global const long* seg = segs + (long)k * SEG_WORDS;                               \
        long l = t - starts[k];                                                              \
        __global T* dst = 0;                                                                 \
        SRC_PICK(seg[0], dst);                                                               \
        T v = buf[buf_off + seg[10] + l];                                                    \
        if (seg[11]) v = negate_##W(v, is_float);                                            \
        dst[box_index(seg, l)] = v;                                                          \
    }

DEFINE_PLAN(uchar, 1)
DEFINE_PLAN(ushort, 2)
DEFINE_PLAN(uint, 4)
DEFINE_PLAN(ulong, 8)
