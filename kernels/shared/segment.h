// The segment a unit of work falls in, by one work-item alone: OpenCL's per-work-item
// kernel (plan.cl). Built before the block kernels too, which search with the whole
// work-group instead (block_segment in plan_blocks.h). Written once in the words of the
// preludes (kernels/opencl/prelude.cl, kernels/cuda/prelude.cuh).
//
// `starts` holds nseg prefix sums (starts[0] == 0) of the segments' sizes in units (blocks
// or elements); unit t belongs to the last segment k with starts[k] <= t: one binary search.

DEVICE_FN int find_segment(GLOBAL const i64* RESTRICT starts, int nseg, i64 t) {
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
