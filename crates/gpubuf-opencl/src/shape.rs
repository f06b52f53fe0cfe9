//! The three shapes of the OpenCL plan kernels and the settings that pick one.
//!
//! - [`PlanKernel::Items`] (`kernels/opencl/plan.cl`): each work-item moves a run of
//!   [`CHUNK_ENV`] consecutive buffer elements, finding its segment by binary search and
//!   advancing the source index incrementally. Chosen only when asked for: it was the CPU
//!   devices' shape before [`PlanKernel::Rows`], which moves the same plans 2-3x faster on
//!   PoCL.
//! - [`PlanKernel::Blocks`] (`kernels/shared/plan_blocks.h`): one work-group of 256
//!   work-items per block of 1024 buffer elements or 32 x 32 tile of a transposed segment,
//!   the segment found once per block, four independent coalesced moves per work-item,
//!   16-byte moves where a block is one aligned row of stride 1 on both sides. The right
//!   shape for GPUs; the same algorithm as the CUDA backend's kernel.
//! - [`PlanKernel::Rows`] (`kernels/opencl/plan_rows.cl`): the CPU backend's row walk for
//!   CPU devices. At `prepare` each segment is normalised as the CPU executor does (axes
//!   reordered so the array is walked in memory order, outer axes of negative array
//!   stride walked forwards with the buffer taking the reversal, axes dense on both sides
//!   folded into longer rows) and cut into units of whole rows of about [`ROW_UNIT`]
//!   elements (a column range of one row when a row alone is longer), one work-item each.
//!   A work-item decomposes its first row once and steps row by row; a row of stride 1 on
//!   both sides is a plain copy loop the device compiler vectorises, a reversed row a
//!   reversed loop, others a strided loop. A transpose (array stride ±1 inside rows, the
//!   buffer's consecutive rows adjacent) is oriented to stride +1 inside the array's rows
//!   and across the buffer's, cut into bands of 64 rows (column ranges of whole tiles
//!   where rows are long, bands starting at each run of rows) and moved in 64 x 64 tiles
//!   staged through a private tile, so every access on either side is a run of 64
//!   adjacent elements; edge tiles move column by column. The shape for CPU devices (PoCL), launched in work-groups of one
//!   work-item there.
//!
//! A backend uses, in order: the shape given to [`crate::OpenClBackend::with_plan_kernel`];
//! [`KERNEL_ENV`] when set; else by `CL_DEVICE_TYPE`, blocks on GPU and accelerator devices
//! that allow work-groups of [`BLOCK_THREADS`], rows elsewhere.

use gpubuf_core::{Error, Result};
use std::fmt::Write as _;

/// The environment variable that overrides the plan kernels' shape: `blocks`, `items` or
/// `rows`.
pub const KERNEL_ENV: &str = "GPUBUF_CL_KERNEL";

/// The environment variable that sets the buffer elements per work-item of the
/// [`PlanKernel::Items`] kernel on CPU devices.
pub const CHUNK_ENV: &str = "GPUBUF_CL_CHUNK";

/// Set to `0` (or `off`), the [`PlanKernel::Blocks`] programs built from then on move every
/// block of a general index (a segment whose blocks cross rows) with 64-bit arithmetic,
/// the path that blocks reaching past 2^31 elements take; unset, blocks that fit take the
/// 32-bit one. A test setting: both paths give the same bytes.
pub const NARROW_ENV: &str = "GPUBUF_CL_NARROW_INDEX";

/// The largest accepted [`CHUNK_ENV`] value (a work-item moving more would leave most of a
/// CPU device idle on all but huge plans).
pub const MAX_CHUNK: usize = 1 << 16;

/// Most source slots a program is built with.
pub const MAX_SLOTS: usize = 64;

/// Work-items per work-group of the [`PlanKernel::Blocks`] kernel (`THREADS` in
/// plan_blocks.h).
pub const BLOCK_THREADS: usize = 256;

/// Buffer elements per block of the [`PlanKernel::Blocks`] kernel (`ELEMS` in
/// kernels/opencl/prelude.cl; its tiles are 32 x 32).
pub const BLOCK_ELEMS: usize = 1024;

/// Elements per work-item (a run of whole rows, or part of one longer row) of the
/// [`PlanKernel::Rows`] kernel.
pub const ROW_UNIT: usize = 32 * 1024;

/// Elements per work-item on CPU devices when [`CHUNK_ENV`] is not set.
pub(crate) const DEFAULT_CHUNK: usize = 64;

/// The shape of the plan kernels a backend builds (see the module docs of
/// `gpubuf_opencl::shape` for what each does and where each is chosen).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanKernel {
    /// Runs of consecutive buffer elements per work-item (`plan.cl`): only when asked for.
    Items,
    /// One work-group per block or tile (`plan_blocks.h`): GPU and accelerator devices.
    Blocks,
    /// Units of whole rows per work-item, walked in the array's memory order
    /// (`plan_rows.cl`): the CPU backend's executor, for CPU devices.
    Rows,
}

impl PlanKernel {
    /// The name [`KERNEL_ENV`] takes for this shape.
    pub fn name(self) -> &'static str {
        match self {
            PlanKernel::Items => "items",
            PlanKernel::Blocks => "blocks",
            PlanKernel::Rows => "rows",
        }
    }
}

impl std::fmt::Display for PlanKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The shape [`KERNEL_ENV`] asks for: `None` when unset or empty, else `blocks`, `items` or
/// `rows` (case and surrounding spaces ignored).
pub(crate) fn kernel_from(value: Option<&str>) -> Result<Option<PlanKernel>> {
    let Some(v) = value else { return Ok(None) };
    match v.trim().to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "blocks" => Ok(Some(PlanKernel::Blocks)),
        "items" => Ok(Some(PlanKernel::Items)),
        "rows" => Ok(Some(PlanKernel::Rows)),
        _ => Err(Error::invalid(format!("{KERNEL_ENV}={v:?}: expected blocks, items or rows"))),
    }
}

/// Whether the block kernel's 32-bit index path is on, as [`NARROW_ENV`] says: on when unset,
/// empty, `1` or `on`; off for `0` or `off` (case and surrounding spaces ignored).
pub(crate) fn narrow_from(value: Option<&str>) -> Result<bool> {
    let Some(v) = value else { return Ok(true) };
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "1" | "on" => Ok(true),
        "0" | "off" => Ok(false),
        _ => Err(Error::invalid(format!("{NARROW_ENV}={v:?}: expected 1, on, 0 or off"))),
    }
}

/// The chunk [`CHUNK_ENV`] asks for: the default when unset, else an integer in
/// `1..=MAX_CHUNK`.
pub(crate) fn chunk_from(value: Option<&str>) -> Result<usize> {
    let Some(v) = value else { return Ok(DEFAULT_CHUNK) };
    v.trim()
        .parse::<usize>()
        .ok()
        .filter(|c| (1..=MAX_CHUNK).contains(c))
        .ok_or_else(|| Error::invalid(format!("{CHUNK_ENV}={v:?}: expected an integer in 1..={MAX_CHUNK}")))
}

/// The prelude defining `CHUNK`, `SRC_PARAMS` and `SRC_PICK` for `slots` source slots
/// (every kernel shape takes it; only the items kernel uses `CHUNK`). Arguments outside what a
/// program can be built with are clamped: `slots` to `1..=MAX_SLOTS`, `chunk` to
/// `1..=MAX_CHUNK`.
pub fn prelude(slots: usize, chunk: usize) -> String {
    let slots = slots.clamp(1, MAX_SLOTS);
    let chunk = chunk.clamp(1, MAX_CHUNK);
    let mut s = format!("#define CHUNK {chunk}\n#define SRC_PARAMS(T)");
    for i in 0..slots {
        let _ = write!(s, " , __global T* s{i}");
    }
    s.push_str("\n#define SRC_PICK(i, p) switch (i) {");
    for i in 0..slots {
        let _ = write!(s, " case {i}: p = s{i} + offs[{i}]; break;");
    }
    s.push_str(" default: break; }\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's block shape is the one the shared block kernel is built with.
    #[test]
    fn block_shape_matches_the_kernel_source() {
        let src = crate::kernels::PLAN_BLOCKS_SOURCE;
        assert!(src.contains(&format!("\n#define ELEMS {BLOCK_ELEMS}\n")), "ELEMS");
        assert!(src.contains(&format!("\n#define THREADS {BLOCK_THREADS}\n")), "THREADS");
        assert_eq!(src.matches("#define ELEMS").count(), 1);
    }

    #[test]
    fn prelude_clamps_its_arguments() {
        assert_eq!(prelude(usize::MAX, 0), prelude(MAX_SLOTS, 1));
        assert!(prelude(0, usize::MAX).contains(&format!("#define CHUNK {MAX_CHUNK}\n")));
    }

    #[test]
    fn chunk_setting_is_checked() {
        assert_eq!(chunk_from(None).unwrap(), DEFAULT_CHUNK);
        assert_eq!(chunk_from(Some("1")).unwrap(), 1);
        assert_eq!(chunk_from(Some(" 128 ")).unwrap(), 128);
        assert_eq!(chunk_from(Some(&MAX_CHUNK.to_string())).unwrap(), MAX_CHUNK);
        for bad in ["0", "-1", "", "x", "65537", "18446744073709551615", "99999999999999999999999"] {
            assert!(chunk_from(Some(bad)).is_err(), "{bad:?} is refused");
        }
    }

    #[test]
    fn narrow_setting_is_parsed_or_refused() {
        for (v, want) in [(None, true), (Some(""), true), (Some(" On "), true), (Some("1"), true)] {
            assert_eq!(narrow_from(v).unwrap(), want, "{v:?}");
        }
        for v in ["0", "OFF", " off "] {
            assert!(!narrow_from(Some(v)).unwrap(), "{v:?}");
        }
        for v in ["2", "no", "wide"] {
            match narrow_from(Some(v)) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(NARROW_ENV), "{m}"),
                other => panic!("{v:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn kernel_setting_is_checked() {
        assert_eq!(kernel_from(None).unwrap(), None);
        assert_eq!(kernel_from(Some(" ")).unwrap(), None);
        assert_eq!(kernel_from(Some("blocks")).unwrap(), Some(PlanKernel::Blocks));
        assert_eq!(kernel_from(Some(" Items ")).unwrap(), Some(PlanKernel::Items));
        assert_eq!(kernel_from(Some("ROWS")).unwrap(), Some(PlanKernel::Rows));
        for bad in ["block", "item", "row", "gpu", "1", "blocks,items"] {
            match kernel_from(Some(bad)) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(KERNEL_ENV), "{m}"),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
        assert_eq!(PlanKernel::Blocks.to_string(), "blocks");
        assert_eq!(PlanKernel::Rows.to_string(), "rows");
    }
}
