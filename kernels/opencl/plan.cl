// Copy-plan gather and scatter for gpubuf's OpenCL backend, the per-work-item shape, run
// when asked for (GPUBUF_CL_KERNEL=items or PlanKernel::Items; CPU devices run
// kernels/opencl/plan_rows.cl, GPU and accelerator devices kernels/shared/plan_blocks.h).
//
// Built after kernels/opencl/prelude.cl and kernels/shared/segment.h (find_segment). The
// host puts before them a prelude that defines:
//   SRC_PARAMS(T)  ", __global T* s0, __global T* s1, ..." (one per source slot)
//   SRC_PICK(i, p) sets pointer p to source slot i plus offs[i], the slot's element offset
//                  in its allocation (offs is a small buffer the host caches per plan)
//   CHUNK          consecutive buffer elements per work-item
// One program per number of source slots; it holds a gather and a scatter kernel per
// element width (1, 2, 4, 8 bytes). Values move as unsigned integers of the width, so
// every dtype is copied bit-exactly; negation flips the sign bit of floats and takes the
// two's complement of integers (the same rule as DType::negate_bytes on the host).
//
// Segment record (12 longs): source, offset, e0, e1, e2, e3, s0, s1, s2, s3, dst, negate.
// starts[k] is the first work-item of segment k (prefix sums of the segment lengths).

#define SEG_WORDS 12

// Each work-item moves CHUNK consecutive buffer elements (CHUNK comes from the host
// prelude: 1 on GPUs, for coalescing; more on CPU devices, to amortise the segment
// search and index decomposition): segment by segment, picking the segment's array once
// and advancing the source index incrementally, carrying across extents.
#define PLAN_KERNEL(NAME, T, W, MOVE)                                                        \
    __kernel void NAME##_##W(__global const long* segs, __global const long* starts,         \
                             int nseg, long total, int is_float, __global T* buf,            \
                             long buf_off, __global const long* offs SRC_PARAMS(T)) {        \
        long t = (long)get_global_id(0) * CHUNK;                                             \
        if (t >= total) return;                                                              \
        long last = min(t + (long)CHUNK, total);                                             \
        int k = find_segment(starts, nseg, t);                                               \
        while (t < last) {                                                                   \
            __global const long* seg = segs + (long)k * SEG_WORDS;                           \
            long seg_start = starts[k];                                                      \
            long stop = min(last, starts[k + 1]);                                            \
            __global T* arr = 0;                                                             \
            SRC_PICK(seg[0], arr);                                                           \
            long l = t - seg_start;                                                          \
            long i3 = l % seg[5];                                                            \
            long r = l / seg[5];                                                             \
            long i2 = r % seg[4];                                                            \
            r /= seg[4];                                                                     \
            long i1 = r % seg[3];                                                            \
            long i0 = r / seg[3];                                                            \
            long idx = seg[1] + i0 * seg[6] + i1 * seg[7] + i2 * seg[8] + i3 * seg[9];       \
            long at = buf_off + seg[10] + l;                                                 \
            for (; t < stop; t++, at++) {                                                    \
                MOVE(T, W)                                                                   \
                i3++;                                                                        \
                idx += seg[9];                                                               \
                if (i3 == seg[5]) {                                                          \
                    i3 = 0; idx -= seg[5] * seg[9]; i2++; idx += seg[8];                     \
                    if (i2 == seg[4]) {                                                      \
                        i2 = 0; idx -= seg[4] * seg[8]; i1++; idx += seg[7];                 \
                        if (i1 == seg[3]) {                                                  \
                            i1 = 0; idx -= seg[3] * seg[7]; i0++; idx += seg[6];             \
                        }                                                                    \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
            k++;                                                                             \
        }                                                                                    \
    }

#define GATHER_MOVE(T, W)                                                                    \
    { T v = arr[idx]; if (seg[11]) v = negate_##W(v, is_float); buf[at] = v; }
#define SCATTER_MOVE(T, W)                                                                   \
    { T v = buf[at]; if (seg[11]) v = negate_##W(v, is_float); arr[idx] = v; }

#define DEFINE_PLAN(T, W)                                                                    \
    inline T negate_##W(T v, int is_float) {                                                 \
        return is_float ? (T)(v ^ (T)((T)1 << (8 * sizeof(T) - 1))) : (T)((T)0 - v);        \
    }                                                                                        \
    PLAN_KERNEL(gather, T, W, GATHER_MOVE)                                                   \
    PLAN_KERNEL(scatter, T, W, SCATTER_MOVE)

DEFINE_PLAN(uchar, 1)
DEFINE_PLAN(ushort, 2)
DEFINE_PLAN(uint, 4)
DEFINE_PLAN(ulong, 8)
