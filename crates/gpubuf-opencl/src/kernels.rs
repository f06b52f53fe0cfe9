//! Copy plans on OpenCL: programs built once per context and cached, plan tables uploaded
//! once per plan, and one kernel launch per plan.
//!
//! OpenCL 1.2 kernels cannot read buffer pointers from memory, so sources are kernel
//! arguments: a program is built for a number of source *slots* (a power of two up to
//! what `CL_DEVICE_MAX_PARAMETER_SIZE` allows, at most 64), unused slots bound to a
//! placeholder. A plan with more sources than the device's slots is split by source into
//! the fewest launches that fit.
//!
//! Three kernel shapes (see [`crate::shape`]): units of rows per work-item on CPU devices,
//! blocks per work-group on GPUs, and, when asked for, runs of elements per work-item. A
//! prepared plan keeps the program, and so the shape, it was prepared with.

use crate::backend::OpenClBackend;
use crate::error::maybe_oom;
use crate::memory::ClMemory;
use crate::shape::{chunk_from, kernel_from, prelude, PlanKernel, BLOCK_ELEMS, BLOCK_THREADS, KERNEL_ENV};
use crate::shape::{narrow_from, CHUNK_ENV, MAX_SLOTS, NARROW_ENV, ROW_UNIT};
use crate::stream::ClStream;
use gpubuf_core::encode::{encode, encode_blocks, BlockShape};
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
use std::ptr;
use std::sync::Arc;

/// The per-work-item kernel source: `kernels/opencl/prelude.cl`, the shared
/// `kernels/shared/segment.h` and `kernels/opencl/plan.cl` (the host's [`prelude`] goes
/// before it).
pub const PLAN_SOURCE: &str = concat!(
    include_str!("../../../kernels/opencl/prelude.cl"),
    include_str!("../../../kernels/shared/segment.h"),
    include_str!("../../../kernels/opencl/plan.cl")
);

/// The block-shaped kernel source: `kernels/opencl/prelude.cl` and the shared
/// `kernels/shared/segment.h` and `kernels/shared/plan_blocks.h`, the text the CUDA backend
/// compiles after its own prelude (the host's [`prelude`] goes before it).
pub const PLAN_BLOCKS_SOURCE: &str = concat!(
    include_str!("../../../kernels/opencl/prelude.cl"),
    include_str!("../../../kernels/shared/segment.h"),
    include_str!("../../../kernels/shared/plan_blocks.h")
);

/// The row-walking kernel source, from `kernels/opencl/plan_rows.cl`.
pub const PLAN_ROWS_SOURCE: &str = include_str!("../../../kernels/opencl/plan_rows.cl");

/// Programs by slot count and shape.
#[derive(Default)]
pub(crate) struct ProgramCache {
    map: Mutex<HashMap<(usize, PlanKernel), Arc<ClProgram>>>,
    placeholder: Mutex<Option<Arc<ClMemory>>>,
}

pub(crate) struct ClProgram {
    /// The program's shape: its plans are encoded and launched for it.
    kernel: PlanKernel,
    /// Buffer elements per work-item the program was built with (its `CHUNK`, 1 for
    /// blocks and rows): launches size their grid by it, whatever the environment says later.
    chunk: usize,
    // Kernels by width index (1, 2, 4, 8 bytes). A kernel's arguments are set and the
    // launch enqueued under its lock: clSetKernelArg is not thread-safe per kernel.
    gather: Vec<Mutex<Kernel>>,
    scatter: Vec<Mutex<Kernel>>,
    _program: Program,
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

    /// Buffer elements per work-item of the [`PlanKernel::Items`] programs built now: 1 on
    /// GPUs and accelerators (coalesced, whatever [`CHUNK_ENV`] says); on CPU devices
    /// [`CHUNK_ENV`] when set, else 64. A program keeps the chunk it was built with; the
    /// block programs ignore it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when [`CHUNK_ENV`] is set to anything but an integer in
    /// `1..=MAX_CHUNK` (0 would move nothing), on every device: a mistyped setting is
    /// reported where it would take effect and where it would not. A plan preparation that
    /// needs a new program then fails with this error.
    pub fn chunk(&self) -> Result<usize> {
        let chunk = chunk_from(std::env::var(CHUNK_ENV).ok().as_deref())?;
        Ok(if self.inner.is_gpu { 1 } else { chunk })
    }

    /// The plan kernel shape for plans prepared now by this handle: the one given to
    /// [`OpenClBackend::with_plan_kernel`]; else [`KERNEL_ENV`] when set; else
    /// [`PlanKernel::Blocks`] on GPU and accelerator devices (`CL_DEVICE_TYPE`) that allow
    /// work-groups of [`BLOCK_THREADS`], [`PlanKernel::Rows`] on others (CPU devices).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming [`KERNEL_ENV`] when it is set to anything but
    /// `blocks`, `items` or `rows` (and no shape was given to the handle); a plan preparation then
    /// fails with this error.
    pub fn plan_kernel(&self) -> Result<PlanKernel> {
        if let Some(k) = self.plan_kernel {
            return Ok(k);
        }
        if let Some(k) = kernel_from(std::env::var(KERNEL_ENV).ok().as_deref())? {
            return Ok(k);
        }
        let gpu_like = self.inner.is_gpu && self.inner.max_group >= BLOCK_THREADS;
        Ok(if gpu_like { PlanKernel::Blocks } else { PlanKernel::Rows })
    }

    /// Builds (once) and returns the program for `slots` source slots in this handle's
    /// shape.
    fn program(&self, slots: usize) -> Result<Arc<ClProgram>> {
        let kernel = self.plan_kernel()?;
        let mut map = self.inner.programs.map.lock();
        if let Some(p) = map.get(&(slots, kernel)) {
            return Ok(p.clone());
        }
        let _span = tracing::debug_span!("opencl.build", slots, kernel = kernel.name()).entered();
        let mut head = String::new();
        let (chunk, body) = match kernel {
            PlanKernel::Items => (self.chunk()?, PLAN_SOURCE),
            PlanKernel::Blocks => {
                if self.inner.max_group < BLOCK_THREADS {
                    return Err(Error::invalid(format!(
                        "the block plan kernel needs work-groups of {BLOCK_THREADS}; {} allows {} \
                         (use the rows or items kernel)",
                        self.inner.entry.info.name, self.inner.max_group
                    )));
                }
                if !narrow_from(std::env::var(NARROW_ENV).ok().as_deref())? {
                    head.push_str("#define NARROW_REACH 0\n");
                }
                (1, PLAN_BLOCKS_SOURCE)
            }
            PlanKernel::Rows => (1, PLAN_ROWS_SOURCE),
        };
        let src = format!("{}{head}{}", prelude(slots, chunk), body);
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
            kernel,
            chunk,
            gather: kernels("gather")?,
            scatter: kernels("scatter")?,
            _program: program,
        });
        map.insert((slots, kernel), p.clone());
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

    /// Compiles the plan program for `slots` slots in this handle's shape
    /// ([`OpenClBackend::plan_kernel`]) and reports the build log on failure;
    /// used by `gpubuf info` and tests to check the kernels build on this device.
    ///
    /// # Errors
    /// [`Error::Build`] with the compiler's log; the setting errors of
    /// [`OpenClBackend::plan_kernel`] and [`OpenClBackend::chunk`].
    pub fn build_kernels(&self, slots: usize) -> Result<()> {
        self.program(slots.clamp(1, self.max_slots())).map(|_| ())
    }
}

/// A plan prepared for one OpenCL device: segment tables on the device, split into the
/// fewest launches that fit the device's source slots (one for most plans).
pub struct ClPlan {
    plan: CopyPlan,
    dtype: DType,
    /// The element type the kernels run with (`gpubuf_core::lane_plan`).
    exec: DType,
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
    /// Prefix sums of the segment lengths (items) or block counts (blocks), or the unit
    /// table (rows).
    index: ClMemory,
    nseg: i32,
    /// Elements moved (items) or units (rows); unused by blocks.
    total: i64,
    /// Global work size of one launch (a multiple of the work-group for blocks).
    global: usize,
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
        self.same_process()?;
        let mut parts = Vec::new();
        // A complex element runs as a word or as its float lanes (`lane_plan`).
        let (lanes, exec) = gpubuf_core::lane_plan(plan, dtype)?;
        for (sources, sub) in lanes.split_by_source(self.max_slots())? {
            let program = self.program(sources.len().next_power_of_two())?;
            let too_big = || Error::plan(format!("{} elements exceed one launch", sub.total()));
            let (nseg, segments, index, total, global) = match program.kernel {
                PlanKernel::Items => {
                    let enc = encode(&sub);
                    // `chunk` is at least 1 (`chunk_from`); `total` at most isize::MAX.
                    let global = enc
                        .total
                        .div_ceil(program.chunk.max(1))
                        .div_ceil(64)
                        .checked_mul(64)
                        .ok_or_else(too_big)?;
                    (enc.nseg(), enc.segments, enc.starts, enc.total, global)
                }
                PlanKernel::Blocks => {
                    let enc = encode_blocks(&sub, BlockShape::new(BLOCK_ELEMS));
                    let global = enc.blocks().checked_mul(BLOCK_THREADS).ok_or_else(too_big)?;
                    (enc.nseg(), enc.segments, enc.groups, enc.total, global)
                }
                PlanKernel::Rows => {
                    let enc = crate::rows::encode_rows(&sub, ROW_UNIT)?;
                    let units = enc.nunits();
                    (enc.nseg(), enc.segments, enc.units, units, units)
                }
            };
            parts.push(Part {
                program,
                sources,
                segs: ClMemory::from_words(&self.inner.context, &segments)?,
                index: ClMemory::from_words(&self.inner.context, &index)?,
                nseg: i32::try_from(nseg).map_err(|_| Error::plan("more than 2^31 segments"))?,
                total: i64::try_from(total).map_err(|_| Error::plan("more than 2^63 elements"))?,
                global,
                offsets: Mutex::new((Vec::new(), None)),
            });
        }
        Ok(ClPlan { plan: plan.clone(), dtype, exec, parts })
    }

    fn gather(
        &self,
        stream: &ClStream,
        plan: &ClPlan,
        sources: &[MemRef<'_, ClMemory>],
        dst: MemRef<'_, ClMemory>,
    ) -> Result<()> {
        self.same_process()?;
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
        self.same_process()?;
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
        // The tables are over the elements the kernels move (`prepare`).
        let lane = plan.exec;
        let size = lane.size();
        let w = width_index(lane);
        let is_float = i32::from(lane.is_float());
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
            if part.global == 0 {
                continue;
            }
            let blocks = part.program.kernel == PlanKernel::Blocks;
            // SAFETY: argument types match the kernels' signatures: plan.cl and plan_rows.cl
            // take (long*, long*, int, long, int, T*, long, long*, T* x slots),
            // plan_blocks.h the same without the `long`; every cl_mem is a live buffer of
            // this context.
            unsafe {
                let mut at = 0u32;
                let mut next = || {
                    at += 1;
                    at - 1
                };
                arg(&kernel, next(), &part.segs.raw())?;
                arg(&kernel, next(), &part.index.raw())?;
                arg(&kernel, next(), &part.nseg)?;
                if !blocks {
                    arg(&kernel, next(), &part.total)?;
                }
                arg(&kernel, next(), &is_float)?;
                arg(&kernel, next(), &buffer.memory.raw())?;
                arg(&kernel, next(), &buf_off)?;
                arg(&kernel, next(), &offsets.raw())?;
                for m in &mems {
                    arg(&kernel, next(), m)?;
                }
            }
            // The block kernel requires work-groups of BLOCK_THREADS (its
            // reqd_work_group_size), which the device allows (checked when it was built).
            // The row kernel runs work-groups of one work-item on CPU devices: a unit is a
            // loop of its own, which the device compiler vectorises when it does not also
            // vectorise across work-items (measured on PoCL: halo packs of many short
            // segments 1.3x faster than with the runtime's choice).
            let rows_alone = part.program.kernel == PlanKernel::Rows && !self.inner.is_gpu;
            let local = [if blocks { BLOCK_THREADS } else { 1 }];
            let local = if blocks || rows_alone { local.as_ptr() } else { ptr::null() };
            // SAFETY: all arguments are set; the work size covers `total` items (items:
            // the kernel returns early for the rounding surplus), one work-item per unit
            // (rows: work-groups of one on CPU devices, else the runtime's choice), or one
            // work-group of BLOCK_THREADS per block (blocks: `global` is that product);
            // `local` points to one size, alive for the call, or is null.
            let ev = unsafe {
                enqueue_nd_range_kernel(
                    stream.queue.get(),
                    kernel.get(),
                    1,
                    ptr::null(),
                    &part.global,
                    local,
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
