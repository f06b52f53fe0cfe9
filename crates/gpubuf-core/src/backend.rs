//! The backend traits: one vocabulary over CPU, OpenCL and CUDA.
//!
//! * [`Allocator`]: raw device allocations ([`DeviceMemory`]).
//! * [`Backend`]: a device handle with streams, stream-ordered transfers, fills and events.
//! * [`Kernels`]: executes [`CopyPlan`]s (gather and scatter) in one launch.
//!
//! # Ordering contract
//! Work submitted to one stream runs in submission order. Work on different streams is
//! unordered unless joined with [`Backend::stream_wait`]. [`Backend::read`] returns only when
//! the bytes are in the caller's slice; [`Backend::write`] returns once the caller's slice has
//! been consumed (it may be reused at once), while the device-side write is ordered on the
//! stream. The CPU backend runs every operation at submission.

use crate::{CopyPlan, DType, Error, Result};
use std::fmt;
use std::sync::Arc;

/// Which backend implementation a handle belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    /// Host memory and rayon kernels; always available.
    Cpu,
    /// OpenCL through opencl3.
    OpenCl,
    /// CUDA through cudarc.
    Cuda,
}

impl BackendKind {
    /// Every backend kind.
    pub const ALL: [BackendKind; 3] = [BackendKind::Cpu, BackendKind::OpenCl, BackendKind::Cuda];

    /// The lowercase name used on the command line (`cpu`, `opencl`, `cuda`).
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::OpenCl => "opencl",
            BackendKind::Cuda => "cuda",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BackendKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        BackendKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::invalid(format!("unknown backend {s:?} (cpu, opencl, cuda)")))
    }
}

/// What a device says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The backend.
    pub backend: BackendKind,
    /// Device name.
    pub name: String,
    /// Vendor or platform name.
    pub vendor: String,
    /// Driver or runtime version string.
    pub version: String,
    /// Global memory in bytes.
    pub total_memory: u64,
    /// Compute units (cores, SMs).
    pub compute_units: u32,
}

/// One device allocation. Dropping it frees the memory (after queued work on the stream
/// that allocated it, where the backend orders frees).
pub trait DeviceMemory: Send + Sync + fmt::Debug + 'static {
    /// Size in bytes.
    fn len(&self) -> usize;

    /// Whether the allocation has zero bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An identifier unique among live allocations of this backend (used for alias checks).
    fn id(&self) -> usize;
}

/// Free and total memory of a device, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes currently free, as far as the driver knows.
    pub free: u64,
    /// Bytes in total.
    pub total: u64,
}

/// Hands out raw device allocations.
pub trait Allocator: Send + Sync + 'static {
    /// The allocation type.
    type Memory: DeviceMemory;

    /// Allocates `bytes` bytes. The implementation may back the memory lazily (PoCL and the
    /// OS do); contents are unspecified but reading them is not undefined behaviour.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the device cannot provide the bytes (retryable), or a
    /// driver error.
    fn allocate(&self, bytes: usize) -> Result<Self::Memory>;

    /// Allocates `bytes` bytes that really exist when this returns (touched or migrated).
    ///
    /// # Errors
    /// As [`Allocator::allocate`].
    fn allocate_immediate(&self, bytes: usize) -> Result<Self::Memory> {
        self.allocate(bytes)
    }

    /// Free and total device memory, when the backend can tell.
    fn memory_info(&self) -> Option<MemoryInfo> {
        None
    }
}

/// A byte range of one allocation.
#[derive(Debug)]
pub struct MemRef<'a, M> {
    /// The allocation.
    pub memory: &'a M,
    /// Offset of the range in bytes.
    pub offset: usize,
    /// Length of the range in bytes.
    pub len: usize,
}

impl<M> Clone for MemRef<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<M> Copy for MemRef<'_, M> {}

impl<'a, M: DeviceMemory> MemRef<'a, M> {
    /// The whole allocation.
    pub fn whole(memory: &'a M) -> Self {
        MemRef { memory, offset: 0, len: memory.len() }
    }

    /// A checked sub-range.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves the allocation.
    pub fn new(memory: &'a M, offset: usize, len: usize) -> Result<Self> {
        let r = MemRef { memory, offset, len };
        r.check()?;
        Ok(r)
    }

    /// Checks the range lies inside its allocation.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when it does not.
    pub fn check(&self) -> Result<()> {
        match self.offset.checked_add(self.len) {
            Some(end) if end <= self.memory.len() => Ok(()),
            _ => Err(Error::OutOfBounds {
                what: "byte range of an allocation".into(),
                start: self.offset,
                end: self.offset.saturating_add(self.len),
                len: self.memory.len(),
            }),
        }
    }

    /// Whether two ranges share at least one byte of the same allocation.
    pub fn overlaps(&self, other: &MemRef<'_, M>) -> bool {
        self.memory.id() == other.memory.id()
            && self.len > 0
            && other.len > 0
            // In u128: a range built field by field may end past usize::MAX.
            && (self.offset as u128) < other.offset as u128 + other.len as u128
            && (other.offset as u128) < self.offset as u128 + self.len as u128
    }
}

/// A device handle: streams, stream-ordered transfers, fills and events.
///
/// Handles are cheap to clone and share one device context.
pub trait Backend: Allocator + Clone + fmt::Debug {
    /// An in-order work queue. Cloning gives another handle to the same queue.
    type Stream: Clone + Send + Sync + fmt::Debug;
    /// A marker recorded on a stream that completes when the work before it has.
    type Event: Send + Sync + fmt::Debug;

    /// Which backend this is. A handle that picks its backend at run time (`gpubuf::Device`)
    /// cannot say it in a constant: ask [`Backend::kind`] of the value.
    const KIND: BackendKind;

    /// Which backend this value is: [`Backend::KIND`], except for a handle that picks its
    /// backend at run time, which names the one it holds.
    fn kind(&self) -> BackendKind {
        Self::KIND
    }

    /// Name, vendor, memory and compute units of the device.
    fn info(&self) -> DeviceInfo;

    /// Whether two handles address the same device and context (memory can be shared).
    fn same_device(&self, other: &Self) -> bool;

    /// `memory`, an allocation of this handle, as an allocation of `target` without a copy,
    /// when `target` is another handle type for this same device (a run-time
    /// `gpubuf::Device` and the concrete backend it holds); `None` otherwise. The two share
    /// the allocation (and, on the CPU, its borrow tracking). The default answers `None`:
    /// only a handle that holds another backend's allocations overrides it.
    fn memory_to<B2: Backend>(&self, memory: &Arc<Self::Memory>, target: &B2) -> Option<Arc<B2::Memory>> {
        let _ = (memory, target);
        None
    }

    /// The converse of [`Backend::memory_to`]: `memory`, an allocation of `source`, as an
    /// allocation of this handle without a copy, when both name the same device; `None`
    /// otherwise (the default).
    fn memory_from<B1: Backend>(&self, source: &B1, memory: &Arc<B1::Memory>) -> Option<Arc<Self::Memory>> {
        let _ = (source, memory);
        None
    }

    /// The stream used when none is given.
    fn default_stream(&self) -> &Self::Stream;

    /// A number identifying `stream` (pools use it to hand a freed block back out on the
    /// stream that freed it without waiting). Two streams of one backend handle never
    /// share a number, and a number is never given to a new stream after its stream is
    /// destroyed, so work still queued on a dead stream is never mistaken for a new
    /// stream's own (the OpenCL and CUDA backends draw them from a process-wide counter,
    /// not from driver handles, which are reused).
    fn stream_id(&self, stream: &Self::Stream) -> u64;

    /// Creates a new stream.
    ///
    /// # Errors
    /// A driver error.
    fn new_stream(&self) -> Result<Self::Stream>;

    /// Copies `src` from the host into `dst` at byte `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves `dst`; [`Error::InvalidArgument`] when
    /// `src` overlaps `dst`'s own bytes (host memory: the CPU backend, where a host slice
    /// can alias an adopted allocation; copy the source first); driver errors.
    fn write(&self, stream: &Self::Stream, dst: &Self::Memory, offset: usize, src: &[u8]) -> Result<()>;

    /// Copies `dst.len()` bytes from `src` at byte `offset` to the host, after the work
    /// queued before it on `stream`; returns when the bytes are in `dst`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves `src`; [`Error::InvalidArgument`] when
    /// `dst` overlaps `src`'s own bytes (as for [`Backend::write`]); driver errors.
    fn read(&self, stream: &Self::Stream, src: &Self::Memory, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// Device-to-device copy of `src.len` bytes to `dst` at byte `dst_offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for ranges outside their allocations,
    /// [`Error::InvalidArgument`] when the ranges overlap in one allocation; driver errors.
    fn copy(
        &self,
        stream: &Self::Stream,
        src: MemRef<'_, Self::Memory>,
        dst: &Self::Memory,
        dst_offset: usize,
    ) -> Result<()>;

    /// Fills `dst` with repetitions of `pattern` (1 to 128 bytes; `dst.len` a multiple of it).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad pattern length; [`Error::OutOfBounds`]; driver errors.
    fn fill(&self, stream: &Self::Stream, dst: MemRef<'_, Self::Memory>, pattern: &[u8]) -> Result<()>;

    /// Records an event after the work queued so far on `stream`.
    ///
    /// # Errors
    /// Driver errors.
    fn record_event(&self, stream: &Self::Stream) -> Result<Self::Event>;

    /// Whether the work before `event` has completed (never blocks).
    ///
    /// # Errors
    /// Driver errors.
    fn event_complete(&self, event: &Self::Event) -> Result<bool>;

    /// An event after the work queued so far on `stream`, or `None` when that work has
    /// already completed (nothing to wait for): [`Backend::record_event`] then
    /// [`Backend::event_complete`], in one call a handle that dispatches at run time makes
    /// once (the pool records one at every stream-ordered free).
    ///
    /// # Errors
    /// Driver errors.
    fn record_pending(&self, stream: &Self::Stream) -> Result<Option<Self::Event>> {
        let event = self.record_event(stream)?;
        Ok(if self.event_complete(&event)? { None } else { Some(event) })
    }

    /// Blocks the host until `event` has completed.
    ///
    /// # Errors
    /// Driver errors.
    fn wait_event(&self, event: &Self::Event) -> Result<()>;

    /// Makes later work on `stream` wait for `event` (possibly from another stream).
    ///
    /// # Errors
    /// Driver errors.
    fn stream_wait(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;

    /// Blocks the host until all work queued on `stream` has completed.
    ///
    /// # Errors
    /// Driver errors.
    fn synchronize(&self, stream: &Self::Stream) -> Result<()>;
}

/// A copy plan prepared for one backend and dtype (uploaded once, reused for every launch).
pub trait PreparedPlan: Send + Sync + fmt::Debug {
    /// The plan it was prepared from.
    fn plan(&self) -> &CopyPlan;
    /// The element type it moves.
    fn dtype(&self) -> DType;
}

/// Executes copy plans: gather (pack) and scatter (unpack), each one launch.
pub trait Kernels: Backend {
    /// The prepared form of a plan.
    type Plan: PreparedPlan;

    /// Prepares `plan` for elements of `dtype` (uploads its segment table once).
    ///
    /// # Errors
    /// Driver errors, or a kernel build error on first use.
    fn prepare(&self, plan: &CopyPlan, dtype: DType) -> Result<Self::Plan>;

    /// Reads every segment's box from `sources` into `dst`, in one launch.
    ///
    /// # Errors
    /// See [`check_plan_args`]; driver errors.
    fn gather(
        &self,
        stream: &Self::Stream,
        plan: &Self::Plan,
        sources: &[MemRef<'_, Self::Memory>],
        dst: MemRef<'_, Self::Memory>,
    ) -> Result<()>;

    /// Writes `src` back into every segment's box of `targets`, in one launch.
    ///
    /// # Errors
    /// See [`check_plan_args`]; [`Error::InvalidPlan`] when a target element is written twice.
    fn scatter(
        &self,
        stream: &Self::Stream,
        plan: &Self::Plan,
        src: MemRef<'_, Self::Memory>,
        targets: &[MemRef<'_, Self::Memory>],
    ) -> Result<()>;
}

/// Checks the arguments of a gather or scatter against a plan: the number of arrays, their
/// byte lengths and alignment, the buffer's length, and that the buffer shares no byte
/// with any array. Every backend calls this before launching.
///
/// # Errors
/// [`Error::InvalidArgument`] for a wrong count, misaligned offset or aliasing, or a
/// negating plan with a dtype that has no negation ([`DType::negatable`]),
/// [`Error::OutOfBounds`] for ranges too short or outside their allocation.
pub fn check_plan_args<M: DeviceMemory>(
    plan: &CopyPlan,
    dtype: DType,
    arrays: &[MemRef<'_, M>],
    buffer: MemRef<'_, M>,
) -> Result<()> {
    // Kernels move elements of at most 8 bytes (a complex128 as two float lanes), so an
    // element is aligned to its size, at most 8 bytes.
    let (size, align) = (dtype.size(), dtype.size().min(8));
    if plan.negates() && !dtype.negatable() {
        return Err(Error::invalid(format!("the plan negates, and {dtype} has no negation")));
    }
    if arrays.len() != plan.source_lens().len() {
        return Err(Error::invalid(format!(
            "plan has {} sources, {} given",
            plan.source_lens().len(),
            arrays.len()
        )));
    }
    buffer.check()?;
    check_bytes("plan buffer", plan.buffer_len(), size, &buffer)?;
    if buffer.offset % align != 0 {
        return Err(Error::invalid(format!("buffer offset {} not a multiple of {align}", buffer.offset)));
    }
    for (i, (a, &n)) in arrays.iter().zip(plan.source_lens()).enumerate() {
        a.check()?;
        check_bytes(&format!("plan source {i}"), n, size, a)?;
        if a.offset % align != 0 {
            return Err(Error::invalid(format!("source {i} offset {} not a multiple of {align}", a.offset)));
        }
        if a.overlaps(&buffer) {
            return Err(Error::invalid(format!("source {i} overlaps the plan buffer")));
        }
    }
    Ok(())
}

/// Checks that `range` holds `elements` elements of `size` bytes. A byte count past
/// `usize::MAX` is reported as a range ending at `usize::MAX` (no range is that long).
fn check_bytes<M>(what: &str, elements: usize, size: usize, range: &MemRef<'_, M>) -> Result<()> {
    match elements.checked_mul(size) {
        Some(bytes) if bytes <= range.len => Ok(()),
        bytes => Err(Error::OutOfBounds {
            what: match bytes {
                Some(_) => format!("{what} (bytes)"),
                None => format!("{what} (bytes: {elements} elements of {size} bytes overflow usize)"),
            },
            start: 0,
            end: bytes.unwrap_or(usize::MAX),
            len: range.len,
        }),
    }
}

/// Checks a fill pattern against the range it fills.
///
/// # Errors
/// [`Error::InvalidArgument`] when the pattern is empty, longer than 128 bytes, or does not
/// divide the range length.
pub fn check_fill<M: DeviceMemory>(dst: &MemRef<'_, M>, pattern: &[u8]) -> Result<()> {
    dst.check()?;
    if pattern.is_empty() || pattern.len() > 128 {
        return Err(Error::invalid(format!("fill pattern of {} bytes (1..=128)", pattern.len())));
    }
    if dst.len % pattern.len() != 0 {
        return Err(Error::invalid(format!(
            "fill of {} bytes is not a multiple of the {}-byte pattern",
            dst.len,
            pattern.len()
        )));
    }
    Ok(())
}

/// Checks a device-to-device copy: both ranges inside their allocations, no overlap.
///
/// # Errors
/// [`Error::OutOfBounds`] or [`Error::InvalidArgument`].
pub fn check_copy<M: DeviceMemory>(src: &MemRef<'_, M>, dst: &M, dst_offset: usize) -> Result<()> {
    src.check()?;
    let d = MemRef { memory: dst, offset: dst_offset, len: src.len };
    d.check()?;
    if src.overlaps(&d) {
        return Err(Error::invalid("copy source and destination overlap"));
    }
    Ok(())
}

/// Checks the arguments of a scatter: those of [`check_plan_args`], targets that share no
/// byte with each other (all of them are written), and a plan that writes each target
/// element once ([`CopyPlan::check_scatter`]).
///
/// # Errors
/// As [`check_plan_args`], plus [`Error::InvalidArgument`] for overlapping targets and
/// [`Error::InvalidPlan`] for a plan that writes an element twice.
pub fn check_scatter_args<M: DeviceMemory>(
    plan: &CopyPlan,
    dtype: DType,
    targets: &[MemRef<'_, M>],
    buffer: MemRef<'_, M>,
) -> Result<()> {
    check_plan_args(plan, dtype, targets, buffer)?;
    for (i, a) in targets.iter().enumerate() {
        for (j, b) in targets.iter().enumerate().skip(i + 1) {
            if a.overlaps(b) {
                return Err(Error::invalid(format!("scatter targets {i} and {j} overlap")));
            }
        }
    }
    plan.check_scatter()
}
