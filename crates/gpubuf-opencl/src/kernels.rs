//! Copy plans on OpenCL: programs built once per context and cached, plan tables uploaded
//! once per plan, and one kernel launch per plan.
//!
//! A plan runs in blocks (gpubuf-core's `encode_blocks`): one work-group per block of
//! consecutive buffer elements, or per tile of a transposed segment, one element per
//! work-item. The work-group size is chosen per device type from device queries: 256 on
//! GPUs; on CPU devices (PoCL), where a work-group runs as a loop over its work-items
//! vectorised across them, the largest the device allows up to 4096, so fewer blocks pay
//! the per-block setup. [`CHUNK_ENV`] overrides it.
//!
//! OpenCL 1.2 kernels cannot read buffer pointers from memory, so sources are kernel
//! arguments: a program is built for a number of source *slots* (a power of two up to
//! what `CL_DEVICE_MAX_PARAMETER_SIZE` allows, at most 64), unused slots bound to a
//! placeholder. A plan with more sources than the device's slots is split by source into
//! the fewest launches that fit.

use crate::backend::{ClStream, OpenClBackend};
use crate::error::maybe_oom;
use crate::memory::ClMemory;
use gpubuf_core::encode::{encode_blocks, BlockShape};
use gpubuf_core::{
    check_plan_args, check_scatter_args, BackendKind, CopyPlan, DType, Error, Kernels, MemRef, PreparedPlan,
    Result,
};
use opencl3::command_queue::enqueue_nd_range_kernel;
use opencl3::event::Event;
use opencl3::kernel::{set_kernel_arg, Kernel};
use opencl3::program::Program;
use opencl3::types::cl_mem;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt::Write as _;
use std::ptr;
use std::sync::Arc;

/// The kernel source, from `kernels/opencl/plan.cl`.
pub const PLAN_SOURCE: &str = include_str!("../../../kernels/opencl/plan.cl");

/// Most source slots a program is built with.
pub const MAX_SLOTS: usize = 64;

/// The environment variable that overrides the plan kernels' work-group size (buffer
/// elements per block), on any device type. The value is rounded down to a power of four
/// and to what the device allows.
pub const CHUNK_ENV: &str = "GPUBUF_CL_CHUNK";

/// The largest accepted [`CHUNK_ENV`] value.
pub const MAX_CHUNK: usize = 1 << 16;

/// Work-group size on CPU devices when [`CHUNK_ENV`] is not set (rounded down to the
/// device's limit).
const DEFAULT_CHUNK: usize = gpubuf_core::encode::MAX_GROUP;

/// Work-group size on GPUs when [`CHUNK_ENV`] is not set.
const GPU_CHUNK: usize = 256;

/// The chunk [`CHUNK_ENV`] asks for: `default` when unset, else an integer in
/// `1..=MAX_CHUNK`.
fn chunk_from(value: Option<&str>, default: usize) -> Result<usize> {
    let Some(v) = value else { return Ok(default) };
    v.trim()
        .parse::<usize>()
        .ok()
        .filter(|c| (1..=MAX_CHUNK).contains(c))
        .ok_or_else(|| Error::invalid(format!("{CHUNK_ENV}={v:?}: expected an integer in 1..={MAX_CHUNK}")))
}

/// Programs by slot count.
#[derive(Default)]
pub(crate) struct ProgramCache {
    map: Mutex<HashMap<usize, Arc<ClProgram>>>,
    placeholder: Mutex<Option<Arc<ClMemory>>>,
}

pub(crate) struct ClProgram {
    /// Work-group size and tile the program was built with (its `GROUP` and `TILE`):
    /// plans are cut and launched by it, whatever the environment says later.
    shape: BlockShape,
    // Kernels by width index (1, 2, 4, 8 bytes). A kernel's arguments are set and the
    // launch enqueued under its lock: clSetKernelArg is not thread-safe per kernel.
    gather: Vec<Mutex<Kernel>>,
    scatter: Vec<Mutex<Kernel>>,
    _program: Program,
}

/// The prelude defining `GROUP`, `TILE`, `SRC_PARAMS` and `SRC_PICK` for `slots` source
/// slots and work-groups of `group` work-items. Arguments outside what a program can be
/// built with are clamped: `slots` to `1..=MAX_SLOTS`, `group` as [`BlockShape::new`] does.
/// `SRC_PICK` is a chain of selects, not a switch: it runs once per block, and branches
/// there would keep PoCL from vectorising the block's moves.
pub fn prelude(slots: usize, group: usize) -> String {
    let slots = slots.clamp(1, MAX_SLOTS);
    let shape = BlockShape::new(group);
    let mut s =
        format!("#define GROUP {}\n#define TILE {}\n#define SRC_PARAMS(T)", shape.group(), shape.tile());
    for i in 0..slots {
        let _ = write!(s, " , __global T* s{i}");
    }
    s.push_str("\n#define SRC_PICK(i, p) { p = s0;");
    for i in 1..slots {
        let _ = write!(s, " p = (i) == {i} ? s{i} : p;");
    }
    s.push_str(" p += offs[i]; }\n");
    s
}

fn width_index(dtype: DType) -> usize {
    dtype.size().trailing_zeros() as usize
}

impl OpenClBackend {
    /// Source slots per launch on this device.
    pub fn max_slots(&self) -> usize {
        // Fixed arguments take 7 words; each slot one pointer.
        let fit = (self.inner.max_param.saturating_sub(7 * 8)) / 8;
        let mut slots = 1;
        while slots * 2 <= fit.min(MAX_SLOTS) {
            slots *= 2;
        }
        slots
    }

    /// The work-group size asked for programs built now: [`CHUNK_ENV`] when set, else
    /// 256 on GPUs and 4096 on other devices. Programs round it down to a power of four
    /// that the device's work-group limit and local memory allow ([`Self::block_shape`]),
    /// and keep the shape they were built with.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when [`CHUNK_ENV`] is set to anything but an integer in
    /// `1..=MAX_CHUNK` (a plan preparation that needs a new program then fails with this
    /// error).
    pub fn chunk(&self) -> Result<usize> {
        let default = if self.inner.is_gpu { GPU_CHUNK } else { DEFAULT_CHUNK };
        chunk_from(std::env::var(CHUNK_ENV).ok().as_deref(), default)
    }

    /// The block shape programs built now use: [`Self::chunk`] rounded down to a power of
    /// four within `CL_DEVICE_MAX_WORK_GROUP_SIZE`, with a tile of 8-byte elements that
    /// fits `CL_DEVICE_LOCAL_MEM_SIZE`.
    ///
    /// # Errors
    /// As [`Self::chunk`].
    pub fn block_shape(&self) -> Result<BlockShape> {
        let device = &self.inner.entry.device;
        let max = device.max_work_group_size().unwrap_or(1).max(1);
        let local = usize::try_from(device.local_mem_size().unwrap_or(0)).unwrap_or(usize::MAX);
        let mut shape = BlockShape::new(self.chunk()?.min(max));
        // A tile holds tile * (tile + 1) elements of up to 8 bytes, beside a small header.
        while shape.group() > 1 && (shape.tile() * (shape.tile() + 1) * 8).saturating_add(512) > local {
            shape = BlockShape::new(shape.group() / 4);
        }
        Ok(shape)
    }

    /// Builds (once) and returns the program for `slots` source slots.
    fn program(&self, slots: usize) -> Result<Arc<ClProgram>> {
        let mut map = self.inner.programs.map.lock();
        if let Some(p) = map.get(&slots) {
            return Ok(p.clone());
        }
        let _span = tracing::debug_span!("opencl.build", slots).entered();
        let shape = self.block_shape()?;
        let src = format!("{}{}", prelude(slots, shape.group()), PLAN_SOURCE);
        let program = self.build_program(&src)?;
        let kernels = |prefix: &str| -> Result<Vec<Mutex<Kernel>>> {
            [1, 2, 4, 8]
                .iter()
                .map(|w| {
                    Kernel::create(&program, &format!("{prefix}_{w}"))
                        .map(Mutex::new)
                        .map_err(|e| crate::error::cl(e, "clCreateKernel"))
                })
                .collect()
        };
        let p = Arc::new(ClProgram {
            shape,
            gather: kernels("gather")?,
            scatter: kernels("scatter")?,
            _program: program,
        });
        map.insert(slots, p.clone());
        Ok(p)
    }

    fn placeholder(&self) -> Result<Arc<ClMemory>> {
        let mut p = self.inner.programs.placeholder.lock();
        if let Some(m) = p.as_ref() {
            return Ok(m.clone());
        }
        let m = Arc::new(ClMemory::from_words(&self.inner.context, &[0i64; 8])?);
        *p = Some(m.clone());
        Ok(m)
    }

    /// Builds OpenCL C `source` for this device (how the plan programs are built).
    ///
    /// # Errors
    /// [`Error::Build`] carrying the compiler's build log when the source does not compile.
    pub fn build_program(&self, source: &str) -> Result<Program> {
        Program::create_and_build_from_source(&self.inner.context, source, "")
            .map_err(|log| Error::Build { backend: BackendKind::OpenCl, log })
    }

    /// Compiles the plan program for `slots` slots and reports the build log on failure;
    /// used by `gpubuf info` and tests to check the kernels build on this device.
    ///
    /// # Errors
    /// [`Error::Build`] with the compiler's log.
    pub fn build_kernels(&self, slots: usize) -> Result<()> {
        self.program(slots.clamp(1, self.max_slots())).map(|_| ())
    }
}

/// A plan prepared for one OpenCL device: segment tables on the device, split into the
/// fewest launches that fit the device's source slots (one for most plans).
pub struct ClPlan {
    plan: CopyPlan,
    dtype: DType,
    parts: Vec<Part>,
}

impl std::fmt::Debug for ClPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClPlan").field("dtype", &self.dtype).field("launches", &self.parts.len()).finish()
    }
}

impl ClPlan {
    /// Kernel launches one gather or scatter of this plan takes.
    pub fn launches(&self) -> usize {
        self.parts.len()
    }
}

struct Part {
    /// Plan source index of each slot.
    sources: Vec<usize>,
    program: Arc<ClProgram>,
    segs: ClMemory,
    groups: ClMemory,
    nseg: i32,
    /// Work-groups of one launch.
    blocks: usize,
    /// Element offsets of the slots in the last launch, and the buffer holding them.
    offsets: Mutex<(Vec<i64>, Option<Arc<ClMemory>>)>,
}

impl PreparedPlan for ClPlan {
    fn plan(&self) -> &CopyPlan {
        &self.plan
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
}

impl Kernels for OpenClBackend {
    type Plan = ClPlan;

    fn prepare(&self, plan: &CopyPlan, dtype: DType) -> Result<ClPlan> {
        let mut parts = Vec::new();
        for (sources, sub) in plan.split_by_source(self.max_slots())? {
            let program = self.program(sources.len().next_power_of_two())?;
            let enc = encode_blocks(&sub, program.shape);
            if enc.blocks() == 0 {
                continue;
            }
            let nseg = i32::try_from(enc.nseg()).map_err(|_| Error::plan("more than 2^31 segments"))?;
            parts.push(Part {
                program,
                sources,
                segs: ClMemory::from_words(&self.inner.context, &enc.segments)?,
                groups: ClMemory::from_words(&self.inner.context, &enc.groups)?,
                nseg,
                blocks: enc.blocks(),
                offsets: Mutex::new((Vec::new(), None)),
            });
        }
        Ok(ClPlan { plan: plan.clone(), dtype, parts })
    }

    fn gather(
        &self,
        stream: &ClStream,
        plan: &ClPlan,
        sources: &[MemRef<'_, ClMemory>],
        dst: MemRef<'_, ClMemory>,
    ) -> Result<()> {
        check_plan_args(&plan.plan, plan.dtype, sources, dst)?;
        let _span = tracing::trace_span!("opencl.gather", elements = plan.plan.total()).entered();
        self.launch(stream, plan, sources, dst, true)
    }

    fn scatter(
        &self,
        stream: &ClStream,
        plan: &ClPlan,
        src: MemRef<'_, ClMemory>,
        targets: &[MemRef<'_, ClMemory>],
    ) -> Result<()> {
        check_scatter_args(&plan.plan, plan.dtype, targets, src)?;
        let _span = tracing::trace_span!("opencl.scatter", elements = plan.plan.total()).entered();
        self.launch(stream, plan, targets, src, false)
    }
}

/// Sets one kernel argument.
///
/// # Safety
/// `value` must have the type the kernel declares for argument `index`.
unsafe fn arg<T>(kernel: &Kernel, index: u32, value: &T) -> Result<()> {
    // SAFETY: `value` is valid for `size_of::<T>()` bytes; the caller matches the type.
    unsafe {
        set_kernel_arg(kernel.get(), index, std::mem::size_of::<T>(), value as *const T as *const c_void)
    }
    .map_err(|c| crate::error::driver(c, &format!("clSetKernelArg({index})")))
}

impl OpenClBackend {
    fn launch(
        &self,
        stream: &ClStream,
        plan: &ClPlan,
        arrays: &[MemRef<'_, ClMemory>],
        buffer: MemRef<'_, ClMemory>,
        gather: bool,
    ) -> Result<()> {
        self.own_stream(stream)?;
        self.own_memory(buffer.memory)?;
        for a in arrays {
            self.own_memory(a.memory)?;
        }
        let size = plan.dtype.size();
        let w = width_index(plan.dtype);
        let is_float = i32::from(plan.dtype.is_float());
        let buf_off = device_index(buffer.offset / size)?;
        let placeholder = self.placeholder()?;
        for part in &plan.parts {
            let offsets = self.part_offsets(part, arrays, size)?;
            let slots = part.sources.len().next_power_of_two();
            let kernel = if gather { &part.program.gather[w] } else { &part.program.scatter[w] };
            let kernel = kernel.lock();
            let mems: Vec<cl_mem> = (0..slots)
                .map(|i| match part.sources.get(i) {
                    Some(&src) => arrays[src].memory.raw(),
                    None => placeholder.raw(),
                })
                .collect();
            // SAFETY: argument types match plan.cl: (long*, long*, int, int, T*, long, long*,
            // T* x slots); every cl_mem is a live buffer of this context.
            unsafe {
                arg(&kernel, 0, &part.segs.raw())?;
                arg(&kernel, 1, &part.groups.raw())?;
                arg(&kernel, 2, &part.nseg)?;
                arg(&kernel, 3, &is_float)?;
                arg(&kernel, 4, &buffer.memory.raw())?;
                arg(&kernel, 5, &buf_off)?;
                arg(&kernel, 6, &offsets.raw())?;
                for (i, m) in mems.iter().enumerate() {
                    arg(&kernel, 7 + i as u32, m)?;
                }
            }
            let local = part.program.shape.group();
            let global = part
                .blocks
                .checked_mul(local)
                .ok_or_else(|| Error::plan(format!("{} blocks exceed one launch", part.blocks)))?;
            // SAFETY: all arguments are set; one work-group of `local` (the kernel's
            // reqd_work_group_size) per block of the table.
            let ev = unsafe {
                enqueue_nd_range_kernel(
                    stream.queue.get(),
                    kernel.get(),
                    1,
                    ptr::null(),
                    &global,
                    &local,
                    0,
                    ptr::null(),
                )
            }
            .map_err(|c| maybe_oom(c, "clEnqueueNDRangeKernel", buffer.len))?;
            drop(Event::new(ev));
        }
        Ok(())
    }

    /// The device buffer of slot offsets for this launch, re-created only when they change.
    fn part_offsets(
        &self,
        part: &Part,
        arrays: &[MemRef<'_, ClMemory>],
        size: usize,
    ) -> Result<Arc<ClMemory>> {
        let want: Vec<i64> =
            part.sources.iter().map(|&s| device_index(arrays[s].offset / size)).collect::<Result<_>>()?;
        let mut cached = part.offsets.lock();
        match &cached.1 {
            Some(m) if cached.0 == want => Ok(m.clone()),
            _ => {
                // A new buffer, never an in-place update: a launch still queued elsewhere
                // keeps reading the old one, which OpenCL frees after that launch.
                let m = Arc::new(ClMemory::from_words(&self.inner.context, &want)?);
                *cached = (want, Some(m.clone()));
                Ok(m)
            }
        }
    }
}

/// An element offset as the kernels' `long`. Offsets inside a real allocation always fit;
/// the check keeps a wrapped value from ever reaching the device.
fn device_index(v: usize) -> Result<i64> {
    i64::try_from(v)
        .map_err(|_| Error::invalid(format!("element offset {v} exceeds the device's 64-bit index")))
}

#[cfg(test)]
mod tests {
    use super::{chunk_from, DEFAULT_CHUNK, MAX_CHUNK};

    #[test]
    fn prelude_clamps_its_arguments() {
        assert_eq!(super::prelude(usize::MAX, 0), super::prelude(super::MAX_SLOTS, 1));
        let p = super::prelude(0, usize::MAX);
        assert!(p.contains("#define GROUP 4096\n#define TILE 64\n"), "{p}");
        assert!(super::prelude(2, 300).contains("#define GROUP 256\n#define TILE 16\n"));
    }

    #[test]
    fn chunk_setting_is_checked() {
        assert_eq!(chunk_from(None, DEFAULT_CHUNK).unwrap(), DEFAULT_CHUNK);
        assert_eq!(chunk_from(None, 7).unwrap(), 7);
        assert_eq!(chunk_from(Some("1"), 7).unwrap(), 1);
        assert_eq!(chunk_from(Some(" 128 "), 7).unwrap(), 128);
        assert_eq!(chunk_from(Some(&MAX_CHUNK.to_string()), 7).unwrap(), MAX_CHUNK);
        for bad in ["0", "-1", "", "x", "65537", "18446744073709551615", "99999999999999999999999"] {
            assert!(chunk_from(Some(bad), 7).is_err(), "{bad:?} is refused");
        }
    }
}
