//! The demo's stencil on the CPU backend (the operations are listed in `stencil.rs`).

use crate::stencil_fields::check_fields;
use gpubuf::cpu::{interop, CpuBackend};
use gpubuf::{Error, NDBuffer, Result};
use ndarray::Ix2;
use std::sync::atomic::{AtomicBool, Ordering};

/// The stencil on the CPU backend: rows of the output split over rayon, each row a loop
/// over three input rows.
pub(crate) struct CpuStencil;

impl CpuStencil {
    /// `next[1..=lx, 1..=ly] = stencil(cur)`, done when it returns (the CPU backend runs
    /// work at submission).
    ///
    /// # Errors
    /// As [`check_fields`]; [`Error::InvalidArgument`] when a view cannot be taken.
    pub(crate) fn step(
        &self,
        cur: &NDBuffer<CpuBackend, f64>,
        next: &NDBuffer<CpuBackend, f64>,
        alpha: f64,
        source: f64,
    ) -> Result<()> {
        let (lx, ly) = check_fields(cur, next)?;
        let h = ly + 2;
        let inner = next.slice(&[1..lx + 1, 1..ly + 1])?;
        let chunk = lx.div_ceil(4 * rayon_threads()).max(1);
        let failed = AtomicBool::new(false);
        interop::view(cur, |u| {
            let Some(u) = u.as_slice() else {
                return Err(Error::invalid("the stencil input is not C-contiguous"));
            };
            interop::view_mut(&inner, |out| {
                interop::par_chunks_mut(out, 0, chunk, |a0, rows| {
                    let Ok(mut rows) = rows.into_dimensionality::<Ix2>() else {
                        failed.store(true, Ordering::Relaxed);
                        return;
                    };
                    for (k, mut row) in rows.outer_iter_mut().enumerate() {
                        // Output row k of the chunk is field row a = a0 + k + 1.
                        let a = a0 + k + 1;
                        let (Some(dst), Some(up), Some(mid), Some(down)) = (
                            row.as_slice_mut(),
                            u.get((a - 1) * h..a * h),
                            u.get(a * h..(a + 1) * h),
                            u.get((a + 1) * h..(a + 2) * h),
                        ) else {
                            failed.store(true, Ordering::Relaxed);
                            return;
                        };
                        row_step(dst, up, mid, down, alpha, source);
                    }
                })
            })?
        })??;
        if failed.load(Ordering::Relaxed) {
            return Err(Error::invalid("the stencil output rows are not contiguous"));
        }
        Ok(())
    }
}

/// One output row: `dst[c] = stencil at column c + 1` of the rows `up`, `mid`, `down`
/// (each `dst.len() + 2` long). Written without `mul_add`: Rust never contracts.
fn row_step(dst: &mut [f64], up: &[f64], mid: &[f64], down: &[f64], alpha: f64, source: f64) {
    let sides = up.iter().skip(1).zip(down.iter().skip(1));
    for ((d, m), (n, s)) in dst.iter_mut().zip(mid.windows(3)).zip(sides) {
        let centre = m[1];
        let lap = (((n + s) + m[0]) + m[2]) - 4.0 * centre;
        *d = (centre + alpha * lap) + source;
    }
}

/// Worker threads of rayon's global pool.
fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
