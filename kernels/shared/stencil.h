// The demo's 5-point heat stencil (gpubuf-cli's stencil.rs says the arithmetic every
// backend shares), written once: the OpenCL backend builds it after
// kernels/opencl/prelude.cl, the CUDA build after kernels/cuda/prelude.cuh, without fused
// multiply-add (OpenCL's FP_CONTRACT OFF, NVRTC's --fmad=false), so both match the CPU
// stencil bit for bit.
//
// Fields (lx + 2, ly + 2) f64, C order, halo 1; `cur_off` and `next_off` are the arrays'
// element offsets in their buffers. Only the interior of `next` is written.

DEVICE_FN double heat_cell(GLOBAL const double* u, u64 i, u64 w, double alpha, double source) {
    double centre = u[i];
    double lap = (((u[i - w] + u[i + w]) + u[i - 1]) + u[i + 1]) - 4.0 * centre;
    return (centre + alpha * lap) + source;
}

// One work-item per interior cell: dimension 0 along a row (c), dimension 1 over rows (a),
// for GPUs (neighbouring work-items read neighbouring elements).
KERNEL heat_cells(GLOBAL const double* cur, u64 cur_off, GLOBAL double* next, u64 next_off, u64 lx,
                  u64 ly, double alpha, double source) {
    u64 c = GLOBAL_ID(0) + 1;
    u64 a = GLOBAL_ID(1) + 1;
    if (c > ly || a > lx) return;
    u64 w = ly + 2;
    u64 i = a * w + c;
    next[next_off + i] = heat_cell(cur + cur_off, i, w, alpha, source);
}

// One work-item per row, a loop along it, for CPU devices (PoCL vectorises the loop;
// 1.2-1.6x the per-cell kernel there).
KERNEL heat_rows(GLOBAL const double* cur, u64 cur_off, GLOBAL double* next, u64 next_off, u64 lx,
                 u64 ly, double alpha, double source) {
    u64 a = GLOBAL_ID(0) + 1;
    if (a > lx) return;
    u64 w = ly + 2;
    for (u64 c = 1; c <= ly; c++) {
        next[next_off + a * w + c] = heat_cell(cur + cur_off, a * w + c, w, alpha, source);
    }
}
