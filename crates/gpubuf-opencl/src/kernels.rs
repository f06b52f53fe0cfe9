//! Copy plans on OpenCL: programs built once per context and cached, plan tables uploaded
//! once per plan, and one kernel launch per plan.
//!
//! OpenCL 1.2 kernels cannot read buffer pointers from memory, so sources are kernel
//! arguments: a program is built for a number of source *slots* (a power of two up to
//! what `CL_DEVICE_MAX_PARAMETER_SIZE` allows, at most 64), unused slots bound to a
//! placeholder. A plan with more sources than the device's slots is split by source into
//! the fewest launches that fit.

use crate::backend::{ClStream, OpenClBackend};
use crate::error::maybe_oom;
use crate::memory::ClMemory;
use gpubuf_core::encode::encode;
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

/// The environment variable that sets the buffer elements per work-item on CPU devices.
pub const CHUNK_ENV: &str = "GPUBUF_CL_CHUNK";

/// The largest accepted [`CHUNK_ENV`] value (a work-item moving more would leave most of a
/// CPU device idle on all but huge plans).
pub const MAX_CHUNK: usize = 1 << 16;

/// Elements per work-item on CPU devices when [`CHUNK_ENV`] is not set.
const DEFAULT_CHUNK: usize = 64;

/// The chunk [`CHUNK_ENV`] asks for: the default when unset, else an integer in
/// `1..=MAX_CHUNK`.
fn chunk_from(value: Option<&str>) -> Result<usize> {
    let Some(v) = value else { return Ok(DEFAULT_CHUNK) };
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
    /// Buffer elements per work-item the program was built with (its `CHUNK`): launches
    /// size their grid by it, whatever the environment says later.
    chunk: usize,
    // Kernels by width index (1, 2, 4, 8 bytes). A kernel's arguments are set and the
    // launch enqueued under its lock: clSetKernelArg is not thread-safe per kernel.
    gather: Vec<Mutex<Kernel>>,
    scatter: Vec<Mutex<Kernel>>,
    _program: Program,
}

/// The prelude defining `CHUNK`, `SRC_PARAMS` and `SRC_PICK` for `slots` source slots.
/// Arguments outside what a program can be built with are clamped: `slots` to
/// `1..=MAX_SLOTS`, `chunk` to `1..=MAX_CHUNK`.
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

    /// Buffer elements per work-item for programs built now: 1 on GPUs (coalesced); on
    /// CPU-like devices [`CHUNK_ENV`] when set, else 64. A program keeps the chunk it was
    /// built with.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when [`CHUNK_ENV`] is set on a CPU-like device to anything
    /// but an integer in `1..=MAX_CHUNK` (0 would move nothing; a plan preparation that
    /// needs a new program then fails with this error).
    pub fn chunk(&self) -> Result<usize> {
        if self.inner.is_gpu {
            Ok(1)
        } else {
            chunk_from(std::env::var(CHUNK_ENV).ok().as_deref())
        }
    }

    /// Builds (once) and returns the program for `slots` source slots.
    fn program(&self, slots: usize) -> Result<Arc<ClProgram>> {
        let mut map = self.inner.programs.map.lock();
        if let Some(p) = map.get(&slots) {
            return Ok(p.clone());
        }
        let _span = tracing::debug_span!("opencl.build", slots).entered();
        let chunk = self.chunk()?;
        let src = format!("{}{}", prelude(slots, chunk), PLAN_SOURCE);
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
            chunk,
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
    starts: ClMemory,
    nseg: i32,
    total: i64,
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
            let enc = encode(&sub);
            let nseg = i32::try_from(enc.nseg()).map_err(|_| Error::plan("more than 2^31 segments"))?;
            parts.push(Part {
                program: self.program(sources.len().next_power_of_two())?,
                sources,
                segs: ClMemory::from_words(&self.inner.context, &enc.segments)?,
                starts: ClMemory::from_words(&self.inner.context, &enc.starts)?,
                nseg,
                total: i64::try_from(enc.total).map_err(|_| Error::plan("more than 2^63 elements"))?,
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
            // SAFETY: argument types match plan.cl: (long*, long*, int, long, int, T*, long,
            // long*, T* x slots); every cl_mem is a live buffer of this context.
            unsafe {
                arg(&kernel, 0, &part.segs.raw())?;
                arg(&kernel, 1, &part.starts.raw())?;
                arg(&kernel, 2, &part.nseg)?;
                arg(&kernel, 3, &part.total)?;
                arg(&kernel, 4, &is_float)?;
                arg(&kernel, 5, &buffer.memory.raw())?;
                arg(&kernel, 6, &buf_off)?;
                arg(&kernel, 7, &offsets.raw())?;
                for (i, m) in mems.iter().enumerate() {
                    arg(&kernel, 8 + i as u32, m)?;
                }
            }
            // `chunk` is at least 1 (`chunk_from`); `total` at most isize::MAX.
            let global = usize::try_from(part.total)
                .ok()
                .and_then(|t| t.div_ceil(part.program.chunk.max(1)).div_ceil(64).checked_mul(64))
                .ok_or_else(|| Error::plan(format!("{} elements exceed one launch", part.total)))?;
            // SAFETY: all arguments are set; the work size covers `total` items, and the
            // kernel returns early for the rounding surplus.
            let ev = unsafe {
                enqueue_nd_range_kernel(
                    stream.queue.get(),
                    kernel.get(),
                    1,
                    ptr::null(),
                    &global,
                    ptr::null(),
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
        assert!(super::prelude(0, usize::MAX).contains(&format!("#define CHUNK {MAX_CHUNK}\n")));
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
}
