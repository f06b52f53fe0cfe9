// Copy-plan gather and scatter walking rows, for OpenCL CPU devices: the CPU backend's
// executor (crates/gpubuf-cpu/src/kernels.rs, rows.rs) as one kernel launch, in
// work-groups of one work-item. The default on CPU devices (GPUBUF_CL_KERNEL=rows or
// PlanKernel::Rows elsewhere); kernels/opencl/plan.cl and plan_blocks.cl are the other
// shapes.
//
// The host prepends the prelude of plan.cl (SRC_PARAMS, SRC_PICK; CHUNK is unused here)
// and encodes the plan (crates/gpubuf-opencl/src/rows.rs):
//   segs   ROW_WORDS longs per segment: source, array offset, buffer offset, e0..e3,
//          array strides a0..a3, buffer strides b0..b3, negate, mode. The axes are in the
//          array's memory order, outer axes of negative array stride already walked
//          forwards (a transpose's axes 2 and 3 oriented as MODE_TILES says), axes dense
//          on both sides folded; the buffer strides say where each element goes (the
//          buffer offset is relative to the buffer's start).
//   units  UNIT_WORDS longs per work-item: segment, first row, rows, first column,
//          columns. Rows count the three outer axes in C order; a unit is whole rows, a
//          column range of one row, or (MODE_TILES) a column range of TILE rows.
// Each work-item decomposes its first row once, then steps from row to row, carrying
// across the outer extents. Per row, by the segment's mode:
//   MODE_COPY      stride 1 on both sides: a plain loop the device compiler vectorises
//   MODE_REVERSED  array stride -1, buffer stride 1: a reversed loop
//   MODE_STRIDED   any other strides
//   MODE_TILES     array stride 1, buffer strided, consecutive rows adjacent in the buffer
//                  (buffer stride 1 on axis 2: a transpose). TILE rows at a time: whole
//                  TILE x TILE tiles staged through a private tile, so that every global
//                  access on either side is a run of TILE adjacent elements (the source
//                  side's rows copied in, the destination's written out in 4 x 4 vector
//                  transposes); the columns left over, and tiles of fewer rows
//                  (cut by a unit's end or a carry), column by column, each buffer access
//                  covering up to TILE adjacent elements
// Values move as unsigned integers of the element width, so every dtype is bit-exact;
// negation flips the sign bit of floats and takes the two's complement of integers.

#define ROW_WORDS 17
#define UNIT_WORDS 5
#define MODE_COPY 0
#define MODE_REVERSED 1
#define MODE_STRIDED 2
#define MODE_TILES 3
#define TILE 64

// Four rows of 4 elements (T4 = T's 4-vector) at `src` (rows `ss` apart) written
// transposed, negated as asked, to four rows at `dst` (rows `ds` apart).
#define TRANSPOSE4(T4, src, ss, dst, ds)                                                        \
    {                                                                                           \
        T4 r0 = vload4(0, (src));                                                               \
        T4 r1 = vload4(0, (src) + (ss));                                                        \
        T4 r2 = vload4(0, (src) + 2 * (ss));                                                    \
        T4 r3 = vload4(0, (src) + 3 * (ss));                                                    \
        vstore4(((T4)(r0.s0, r1.s0, r2.s0, r3.s0) ^ flip4) + add4, 0, (dst));                   \
        vstore4(((T4)(r0.s1, r1.s1, r2.s1, r3.s1) ^ flip4) + add4, 0, (dst) + (ds));            \
        vstore4(((T4)(r0.s2, r1.s2, r2.s2, r3.s2) ^ flip4) + add4, 0, (dst) + 2 * (ds));        \
        vstore4(((T4)(r0.s3, r1.s3, r2.s3, r3.s3) ^ flip4) + add4, 0, (dst) + 3 * (ds));        \
    }

// One whole tile between array rows a + t * a2 and buffer rows b + j * b3 (t, j < TILE):
// the source side's rows copied into `tile`, then the destination's rows written from it
// in 4 x 4 transposes.
#define TILE_GATHER(T4)                                                                         \
    for (int t = 0; t < TILE; t++)                                                              \
        for (int j = 0; j < TILE; j++) tile[t][j] = a[t * a2 + j];                              \
    for (int j = 0; j < TILE; j += 4)                                                           \
        for (int t = 0; t < TILE; t += 4) TRANSPOSE4(T4, &tile[t][j], TILE, b + j * b3 + t, b3)
#define TILE_SCATTER(T4)                                                                        \
    for (int j = 0; j < TILE; j++)                                                              \
        for (int t = 0; t < TILE; t++) tile[j][t] = b[j * b3 + t];                              \
    for (int t = 0; t < TILE; t += 4)                                                           \
        for (int j = 0; j < TILE; j += 4) TRANSPOSE4(T4, &tile[j][t], TILE, a + t * a2 + j, a2)

// The whole tiles of one band (TILE rows of n columns, the array side at `arr`, the
// buffer side at `buf`) moved by MOVE (TILE_GATHER or TILE_SCATTER); returns the first
// column left over. Functions of their own, not inlined: with the tile and its loops
// inside the kernel, halo packs (MODE_COPY rows) ran up to 13% slower on PoCL.
#define TILE_FN(T, W, NAME, MOVE)                                                               \
    __attribute__((noinline)) long NAME##_##W(__global T* arr, __global T* buf, long n,        \
                                              long a2, long b3, T flip, T add) {                \
        const T##4 flip4 = (T##4)flip, add4 = (T##4)add;                                        \
        T tile[TILE][TILE];                                                                     \
        long k = 0;                                                                             \
        for (; k + TILE <= n; k += TILE) {                                                      \
            __global T* a = arr + k;                                                            \
            __global T* b = buf + k * b3;                                                       \
            MOVE(T##4)                                                                          \
        }                                                                                       \
        return k;                                                                               \
    }
#define TILE_FNS(T, W)                                                                          \
    TILE_FN(T, W, tiles_gather, TILE_GATHER)                                                    \
    TILE_FN(T, W, tiles_scatter, TILE_SCATTER)

// One kernel per direction and width: GATHER is 1 (array -> buffer) or 0 (buffer ->
// array). `(v ^ flip) + add` negates (flip = sign bit for floats, all ones for integers,
// add = 1 for integers) or leaves v alone (both 0).
#define PLAN_ROWS(NAME, T, W, GATHER)                                                           \
    __kernel void NAME##_##W(__global const long* segs, __global const long* units, int nseg,   \
                             long nunits, int is_float, __global T* buf, long buf_off,          \
                             __global const long* offs SRC_PARAMS(T)) {                         \
        const long u = get_global_id(0);                                                        \
        if (u >= nunits) return;                                                                \
        __global const long* unit = units + u * UNIT_WORDS;                                     \
        __global const long* seg = segs + unit[0] * ROW_WORDS;                                  \
        __global T* arr = 0;                                                                    \
        SRC_PICK(seg[0], arr);                                                                  \
        const long e1 = seg[4], e2 = seg[5];                                                    \
        const long a0 = seg[7], a1 = seg[8], a2 = seg[9], a3 = seg[10];                         \
        const long b0 = seg[11], b1 = seg[12], b2 = seg[13], b3 = seg[14];                      \
        const int neg = seg[15] != 0;                                                           \
        const long mode = seg[16];                                                              \
        const T flip = neg ? (is_float ? (T)((T)1 << (8 * W - 1)) : (T) ~(T)0) : (T)0;          \
        const T add = (neg && !is_float) ? (T)1 : (T)0;                                         \
        long r = unit[1];                                                                       \
        const long r1 = r + unit[2];                                                            \
        const long c0 = unit[3], n = unit[4];                                                   \
        long i2 = r % e2, q = r / e2;                                                           \
        long i1 = q % e1, i0 = q / e1;                                                          \
        long pa = seg[1] + i0 * a0 + i1 * a1 + i2 * a2 + c0 * a3;                               \
        long pb = buf_off + seg[2] + i0 * b0 + i1 * b1 + i2 * b2 + c0 * b3;                     \
        while (1) {                                                                             \
            long g = 1;                                                                         \
            if (mode == MODE_COPY) {                                                            \
                __global T* dst = GATHER ? buf + pb : arr + pa;                                 \
                __global const T* src = GATHER ? arr + pa : buf + pb;                           \
                if (neg) {                                                                      \
                    for (long k = 0; k < n; k++) dst[k] = (T)((src[k] ^ flip) + add);           \
                } else {                                                                        \
                    for (long k = 0; k < n; k++) dst[k] = src[k];                               \
                }                                                                               \
            } else if (mode == MODE_REVERSED) {                                                 \
                __global T* a = arr + pa;                                                       \
                __global T* b = buf + pb;                                                       \
                if (GATHER) {                                                                   \
                    for (long k = 0; k < n; k++) b[k] = (T)((a[-k] ^ flip) + add);              \
                } else {                                                                        \
                    for (long k = 0; k < n; k++) a[-k] = (T)((b[k] ^ flip) + add);              \
                }                                                                               \
            } else if (mode == MODE_TILES) {                                                    \
                /* Rows of one run along axis 2 (no carry inside a tile). */                    \
                g = min(min((long)TILE, r1 - r), e2 - i2);                                      \
                long k = 0;                                                                     \
                if (g == TILE) {                                                                \
                    k = GATHER ? tiles_gather_##W(arr + pa, buf + pb, n, a2, b3, flip, add)     \
                               : tiles_scatter_##W(arr + pa, buf + pb, n, a2, b3, flip, add);   \
                }                                                                               \
                for (; k < n; k++) {                                                            \
                    __global T* a = arr + pa + k;                                               \
                    __global T* b = buf + pb + k * b3;                                          \
                    for (long t = 0; t < g; t++) {                                              \
                        if (GATHER) {                                                           \
                            b[t] = (T)((a[t * a2] ^ flip) + add);                               \
                        } else {                                                                \
                            a[t * a2] = (T)((b[t] ^ flip) + add);                               \
                        }                                                                       \
                    }                                                                           \
                }                                                                               \
            } else {                                                                            \
                __global T* a = arr + pa;                                                       \
                __global T* b = buf + pb;                                                       \
                if (GATHER) {                                                                   \
                    for (long k = 0; k < n; k++) b[k * b3] = (T)((a[k * a3] ^ flip) + add);     \
                } else {                                                                        \
                    for (long k = 0; k < n; k++) a[k * a3] = (T)((b[k * b3] ^ flip) + add);     \
                }                                                                               \
            }                                                                                   \
            r += g;                                                                             \
            if (r >= r1) break;                                                                 \
            /* To the next row (which exists): every position formed is a row start. */         \
            if (i2 + g < e2) {                                                                  \
                i2 += g;                                                                        \
                pa += g * a2;                                                                   \
                pb += g * b2;                                                                   \
            } else {                                                                            \
                pa -= i2 * a2;                                                                  \
                pb -= i2 * b2;                                                                  \
                i2 = 0;                                                                         \
                if (i1 + 1 < e1) {                                                              \
                    i1++;                                                                       \
                    pa += a1;                                                                   \
                    pb += b1;                                                                   \
                } else {                                                                        \
                    pa += a0 - i1 * a1;                                                         \
                    pb += b0 - i1 * b1;                                                         \
                    i1 = 0;                                                                     \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }

#define DEFINE_PLAN(T, W)                                                                       \
    TILE_FNS(T, W)                                                                              \
    PLAN_ROWS(gather, T, W, 1)                                                                  \
    PLAN_ROWS(scatter, T, W, 0)

DEFINE_PLAN(uchar, 1)
DEFINE_PLAN(ushort, 2)
DEFINE_PLAN(uint, 4)
DEFINE_PLAN(ulong, 8)
