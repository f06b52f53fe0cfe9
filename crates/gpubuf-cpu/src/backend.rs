//! [`CpuBackend`]: the backend traits over host memory.

use crate::borrow::Mode;
use crate::kernels::{execute, par_memcpy, plan_spans, Direction};
use crate::memory::{borrow_all, CpuMemory};
use gpubuf_core::{
    check_copy, check_fill, check_plan_args, check_scatter_args, Allocator, Backend, BackendKind, CopyPlan,
    DType, DeviceInfo, Error, Kernels, MemRef, MemoryInfo, PreparedPlan, Result,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The CPU backend. Always available. Streams are in-order by construction: every
/// operation runs to completion when it is submitted, so events are complete as soon as
/// they are recorded and `synchronize` returns at once.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    default_stream: CpuStream,
    next_stream: AtomicU64,
}

/// A CPU stream: a name only, since work runs at submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuStream {
    id: u64,
}

impl CpuStream {
    /// The stream's number (0 is the default stream).
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// A CPU event: complete when recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuEvent;

/// A plan prepared for the CPU (the plan itself, and for a complex dtype the plan over
/// its lanes; nothing to upload).
#[derive(Debug, Clone)]
pub struct CpuPlan {
    plan: CopyPlan,
    dtype: DType,
    /// The plan over lanes, when the kernels run one (`gpubuf_core::lane_plan`).
    lanes: Option<CopyPlan>,
    /// The element type the kernels run with.
    exec: DType,
}

impl CpuPlan {
    /// The plan the kernels run and the element type they run it with.
    fn exec(&self) -> (&CopyPlan, DType) {
        (self.lanes.as_ref().unwrap_or(&self.plan), self.exec)
    }
}

impl PreparedPlan for CpuPlan {
    fn plan(&self) -> &CopyPlan {
        &self.plan
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    /// A handle to the host "device". Handles made by `new` are distinct devices as far as
    /// [`Backend::same_device`] is concerned; clone a handle to share it.
    pub fn new() -> Self {
        CpuBackend {
            inner: Arc::new(Inner { default_stream: CpuStream { id: 0 }, next_stream: AtomicU64::new(1) }),
        }
    }
}

impl Allocator for CpuBackend {
    type Memory = CpuMemory;

    fn allocate(&self, bytes: usize) -> Result<CpuMemory> {
        CpuMemory::new(bytes, false)
    }

    fn allocate_immediate(&self, bytes: usize) -> Result<CpuMemory> {
        CpuMemory::new(bytes, true)
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        let text = read_proc("/proc/meminfo")?;
        let field = |name: &str| -> Option<u64> {
            let line = text.lines().find(|l| l.starts_with(name))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()?.checked_mul(1024)
        };
        Some(MemoryInfo { free: field("MemAvailable:")?, total: field("MemTotal:")? })
    }
}

/// A `/proc` file's text, when it can be read. Never under Miri: its isolation refuses to
/// open files (and aborts the program rather than failing the call), so the device
/// description falls back to what needs no file.
fn read_proc(path: &str) -> Option<String> {
    if cfg!(miri) {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// Threads the kernels use: rayon's pool, or 1 where they run serially (under Miri).
fn threads() -> usize {
    if crate::kernels::PARALLEL {
        rayon::current_num_threads()
    } else {
        1
    }
}

fn cpu_name() -> String {
    read_proc("/proc/cpuinfo")
        .and_then(|t| t.lines().find(|l| l.starts_with("model name")).map(|l| l.to_string()))
        .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

impl Backend for CpuBackend {
    type Stream = CpuStream;
    type Event = CpuEvent;
    const KIND: BackendKind = BackendKind::Cpu;

    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: BackendKind::Cpu,
            name: cpu_name(),
            vendor: "host".into(),
            version: format!("rayon, {} threads", threads()),
            total_memory: self.memory_info().map_or(0, |m| m.total),
            compute_units: u32::try_from(threads()).unwrap_or(u32::MAX),
        }
    }

    fn same_device(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn default_stream(&self) -> &CpuStream {
        &self.inner.default_stream
    }

    fn stream_id(&self, stream: &CpuStream) -> u64 {
        stream.id
    }

    fn new_stream(&self) -> Result<CpuStream> {
        Ok(CpuStream { id: self.inner.next_stream.fetch_add(1, Ordering::Relaxed) })
    }

    /// Copies `src` into `dst` at byte `offset`, at once.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves `dst`; [`Error::InvalidArgument`] when
    /// `src` shares a byte with `dst` (host memory adopted by [`CpuMemory::adopt_raw`],
    /// passed back through a foreign view of it): copy it to memory of its own first.
    /// Nothing is written then.
    fn write(&self, _stream: &CpuStream, dst: &CpuMemory, offset: usize, src: &[u8]) -> Result<()> {
        MemRef::new(dst, offset, src.len())?;
        refuse_aliased(dst, src.as_ptr(), src.len(), "write from")?;
        let _span = tracing::trace_span!("cpu.write", bytes = src.len()).entered();
        // Only the bytes written are borrowed; `MemRef::new` checked them in bounds.
        dst.with_range_mut(offset, src.len(), |d| d.copy_from_slice(src))
    }

    /// Copies `dst.len()` bytes from `src` at byte `offset` into `dst`, at once.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves `src`; [`Error::InvalidArgument`] when
    /// `dst` shares a byte with `src` (as for [`CpuBackend::write`]). Nothing is written
    /// then.
    fn read(&self, _stream: &CpuStream, src: &CpuMemory, offset: usize, dst: &mut [u8]) -> Result<()> {
        MemRef::new(src, offset, dst.len())?;
        refuse_aliased(src, dst.as_ptr(), dst.len(), "read into")?;
        let _span = tracing::trace_span!("cpu.read", bytes = dst.len()).entered();
        // Only the bytes read are borrowed; `MemRef::new` checked them in bounds.
        src.with_range(offset, dst.len(), |s| dst.copy_from_slice(s))
    }

    fn copy(
        &self,
        _stream: &CpuStream,
        src: MemRef<'_, CpuMemory>,
        dst: &CpuMemory,
        dst_offset: usize,
    ) -> Result<()> {
        check_copy(&src, dst, dst_offset)?;
        let _span = tracing::trace_span!("cpu.copy", bytes = src.len).entered();
        let (_borrows, ptrs) = borrow_all(&[
            (src.memory, src.offset, src.len, Mode::Shared),
            (dst, dst_offset, src.len, Mode::Exclusive),
        ])?;
        // SAFETY: both ranges were checked inside their allocations and not to overlap;
        // the source range is borrowed for reading and the destination range for writing
        // until `_borrows` drops, and the copy touches those bytes only.
        unsafe { par_memcpy(ptrs[1].add(dst_offset), ptrs[0].add(src.offset), src.len) };
        Ok(())
    }

    fn fill(&self, _stream: &CpuStream, dst: MemRef<'_, CpuMemory>, pattern: &[u8]) -> Result<()> {
        check_fill(&dst, pattern)?;
        let _span = tracing::trace_span!("cpu.fill", bytes = dst.len).entered();
        // Only the bytes filled are borrowed; `check_fill` checked them in bounds, whole
        // patterns.
        dst.memory.with_range_mut(dst.offset, dst.len, |range| match pattern {
            [first, rest @ ..] if rest.iter().all(|b| b == first) => range.fill(*first),
            _ => {
                for chunk in range.chunks_exact_mut(pattern.len()) {
                    chunk.copy_from_slice(pattern);
                }
            }
        })
    }

    fn record_event(&self, _stream: &CpuStream) -> Result<CpuEvent> {
        Ok(CpuEvent)
    }

    fn event_complete(&self, _event: &CpuEvent) -> Result<bool> {
        Ok(true)
    }

    fn wait_event(&self, _event: &CpuEvent) -> Result<()> {
        Ok(())
    }

    fn stream_wait(&self, _stream: &CpuStream, _event: &CpuEvent) -> Result<()> {
        Ok(())
    }

    fn synchronize(&self, _stream: &CpuStream) -> Result<()> {
        Ok(())
    }
}

impl Kernels for CpuBackend {
    type Plan = CpuPlan;

    fn prepare(&self, plan: &CopyPlan, dtype: DType) -> Result<CpuPlan> {
        let (lanes, exec) = gpubuf_core::lane_plan(plan, dtype)?;
        let lanes = match lanes {
            std::borrow::Cow::Owned(p) => Some(p),
            std::borrow::Cow::Borrowed(_) => None,
        };
        Ok(CpuPlan { plan: plan.clone(), dtype, lanes, exec })
    }

    fn gather(
        &self,
        _stream: &CpuStream,
        plan: &CpuPlan,
        sources: &[MemRef<'_, CpuMemory>],
        dst: MemRef<'_, CpuMemory>,
    ) -> Result<()> {
        check_plan_args(&plan.plan, plan.dtype, sources, dst)?;
        let _span = tracing::trace_span!("cpu.gather", elements = plan.plan.total()).entered();
        run(plan, sources, dst, Direction::Gather)
    }

    fn scatter(
        &self,
        _stream: &CpuStream,
        plan: &CpuPlan,
        src: MemRef<'_, CpuMemory>,
        targets: &[MemRef<'_, CpuMemory>],
    ) -> Result<()> {
        check_scatter_args(&plan.plan, plan.dtype, targets, src)?;
        let _span = tracing::trace_span!("cpu.scatter", elements = plan.plan.total()).entered();
        run(plan, targets, src, Direction::Scatter)
    }
}

/// Refuses a host slice (at `host`, `len` bytes) that shares bytes with `memory`: the
/// copy would hold the caller's slice and a slice of the whole allocation over the same
/// bytes, one of them `&mut`. Only addresses are compared, before any reference to the
/// allocation is formed.
fn refuse_aliased(memory: &CpuMemory, host: *const u8, len: usize, what: &str) -> Result<()> {
    if memory.overlaps_host(host as usize, len) {
        return Err(Error::invalid(format!(
            "cpu {what} a host slice ({len} bytes at {host:p}) that lies in the allocation itself \
             (adopted memory seen through a host view): copy it first"
        )));
    }
    Ok(())
}

fn run(
    plan: &CpuPlan,
    arrays: &[MemRef<'_, CpuMemory>],
    buffer: MemRef<'_, CpuMemory>,
    dir: Direction,
) -> Result<()> {
    // Gather reads the arrays and writes the buffer; scatter the other way round.
    let (read, written) = match dir {
        Direction::Gather => (Mode::Shared, Mode::Exclusive),
        Direction::Scatter => (Mode::Exclusive, Mode::Shared),
    };
    let (exec, dtype) = plan.exec();
    let spans = plan_spans(exec, dtype.size(), arrays, read, buffer, written);
    let (_borrows, ptrs) = borrow_all(&spans)?;
    // SAFETY: `check_plan_args` proved every range inside its allocation, long enough for
    // the plan, aligned to the dtype, and the buffer disjoint from the arrays; for scatter
    // the targets are disjoint and the plan writes each element once. The plan touches
    // only the bytes `plan_spans` names (its segments' reach in each array, its buffer
    // elements), borrowed until `_borrows` drops: for writing where it writes, for
    // reading where it reads.
    unsafe {
        let array_ptrs: Vec<*mut u8> = arrays.iter().zip(&ptrs).map(|(a, p)| p.add(a.offset)).collect();
        let buf = ptrs[arrays.len()].add(buffer.offset);
        execute(exec, dtype, &array_ptrs, buf, dir);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::NonNull;

    #[test]
    fn write_and_read_refuse_host_slices_inside_the_allocation() {
        let cpu = CpuBackend::new();
        let s = cpu.default_stream();
        let mut storage: Vec<u64> = (0..8).collect();
        let before = storage.clone();
        let base = storage.as_mut_ptr().cast::<u8>();
        // Every pointer below derives from `base`, into the 64 bytes of `storage`, which
        // outlives `mem` and is not used through the Vec until `mem` is dropped.
        // SAFETY: the lower 32 bytes, valid and initialised while `storage` lives; the
        // slices that overlap them are only given to calls that must refuse them before
        // touching a byte.
        let mem = unsafe { CpuMemory::adopt_raw(NonNull::new(base).unwrap(), 32, Box::new(())) }.unwrap();
        // SAFETY: bytes 8..24 of `storage`, read-only here.
        let inside = unsafe { std::slice::from_raw_parts(base.add(8), 16) };
        // SAFETY: bytes 24..40 of `storage`, read-only here.
        let straddling = unsafe { std::slice::from_raw_parts(base.add(24), 16) };
        for src in [inside, straddling] {
            let r = cpu.write(s, &mem, 0, src);
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        }
        // SAFETY: bytes 16..24 of `storage`; `inside` and `straddling` are not used again.
        let dst = unsafe { std::slice::from_raw_parts_mut(base.add(16), 8) };
        let r = cpu.read(s, &mem, 0, dst);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        // Adjacent bytes are not the allocation's: copied as usual, and the memory stays
        // usable after the refusals.
        // SAFETY: bytes 32..40 of `storage`, outside the adopted range; `dst` is not used
        // again.
        let upper = unsafe { std::slice::from_raw_parts_mut(base.add(32), 8) };
        cpu.read(s, &mem, 8, upper).unwrap();
        // SAFETY: the same 8 bytes, the mutable slice no longer used.
        let upper = unsafe { std::slice::from_raw_parts(base.add(32), 8) };
        cpu.write(s, &mem, 0, upper).unwrap();
        drop(mem);
        let mut want = before;
        want[4] = want[1];
        want[0] = want[1];
        assert_eq!(storage, want);
    }

    #[test]
    fn overlaps_host_compares_addresses_only() {
        let mem = CpuMemory::new(64, false).unwrap();
        let base = mem.as_ptr() as usize;
        assert!(mem.overlaps_host(base, 1));
        assert!(mem.overlaps_host(base + 63, 1));
        assert!(mem.overlaps_host(base - 8, 9));
        assert!(!mem.overlaps_host(base + 64, 16));
        assert!(!mem.overlaps_host(base - 8, 8));
        assert!(!mem.overlaps_host(base + 8, 0));
        assert!(mem.overlaps_host(0, usize::MAX));
        assert!(!mem.overlaps_host(usize::MAX, usize::MAX));
        assert!(!CpuMemory::new(0, false).unwrap().overlaps_host(0, usize::MAX));
    }
}
