//! A backend wrapper whose n-th data movement fails: tests of what an operation that fails
//! part-way leaves behind, on every backend.

#![allow(dead_code)]

use gpubuf::{
    Allocator, Backend, BackendKind, CopyPlan, DType, DeviceInfo, Error, Kernels, MemRef, MemoryInfo, Result,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// `inner` with a countdown: once armed with [`Faulty::fail_after`]`(n)`, the first `n`
/// writes, reads, copies, fills, gathers, scatters and allocations succeed and every later
/// one returns a driver error (until [`Faulty::disarm`]).
#[derive(Debug, Clone)]
pub struct Faulty<B> {
    inner: B,
    /// Operations left before failures start; `usize::MAX` when disarmed.
    left: Arc<AtomicUsize>,
}

impl<B: Kernels> Faulty<B> {
    /// Wraps `inner`, disarmed.
    pub fn new(inner: &B) -> Self {
        Faulty { inner: inner.clone(), left: Arc::new(AtomicUsize::new(usize::MAX)) }
    }

    /// Lets `n` more operations through, then fails every one.
    pub fn fail_after(&self, n: usize) {
        self.left.store(n, Ordering::SeqCst);
    }

    /// Lets every operation through again.
    pub fn disarm(&self) {
        self.left.store(usize::MAX, Ordering::SeqCst);
    }

    fn tick(&self, what: &str) -> Result<()> {
        let ok = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
                usize::MAX => Some(n),
                0 => None,
                n => Some(n - 1),
            })
            .is_ok();
        if ok {
            Ok(())
        } else {
            Err(Error::Driver { backend: B::KIND, code: -1, message: format!("injected failure of {what}") })
        }
    }
}

impl<B: Kernels> Allocator for Faulty<B> {
    type Memory = B::Memory;

    fn allocate(&self, bytes: usize) -> Result<B::Memory> {
        self.tick("allocate")?;
        self.inner.allocate(bytes)
    }

    fn allocate_immediate(&self, bytes: usize) -> Result<B::Memory> {
        self.tick("allocate")?;
        self.inner.allocate_immediate(bytes)
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        self.inner.memory_info()
    }
}

impl<B: Kernels> Backend for Faulty<B> {
    type Stream = B::Stream;
    type Event = B::Event;
    const KIND: BackendKind = B::KIND;

    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }

    fn same_device(&self, other: &Self) -> bool {
        self.inner.same_device(&other.inner)
    }

    fn default_stream(&self) -> &B::Stream {
        self.inner.default_stream()
    }

    fn stream_id(&self, stream: &B::Stream) -> u64 {
        self.inner.stream_id(stream)
    }

    fn new_stream(&self) -> Result<B::Stream> {
        self.inner.new_stream()
    }

    fn write(&self, stream: &B::Stream, dst: &B::Memory, offset: usize, src: &[u8]) -> Result<()> {
        self.tick("write")?;
        self.inner.write(stream, dst, offset, src)
    }

    fn read(&self, stream: &B::Stream, src: &B::Memory, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.tick("read")?;
        self.inner.read(stream, src, offset, dst)
    }

    fn copy(&self, stream: &B::Stream, src: MemRef<'_, B::Memory>, dst: &B::Memory, at: usize) -> Result<()> {
        self.tick("copy")?;
        self.inner.copy(stream, src, dst, at)
    }

    fn fill(&self, stream: &B::Stream, dst: MemRef<'_, B::Memory>, pattern: &[u8]) -> Result<()> {
        self.tick("fill")?;
        self.inner.fill(stream, dst, pattern)
    }

    fn record_event(&self, stream: &B::Stream) -> Result<B::Event> {
        self.inner.record_event(stream)
    }

    fn event_complete(&self, event: &B::Event) -> Result<bool> {
        self.inner.event_complete(event)
    }

    fn wait_event(&self, event: &B::Event) -> Result<()> {
        self.inner.wait_event(event)
    }

    fn stream_wait(&self, stream: &B::Stream, event: &B::Event) -> Result<()> {
        self.inner.stream_wait(stream, event)
    }

    fn synchronize(&self, stream: &B::Stream) -> Result<()> {
        self.inner.synchronize(stream)
    }
}

impl<B: Kernels> Kernels for Faulty<B> {
    type Plan = B::Plan;

    fn prepare(&self, plan: &CopyPlan, dtype: DType) -> Result<B::Plan> {
        self.inner.prepare(plan, dtype)
    }

    fn gather(
        &self,
        stream: &B::Stream,
        plan: &B::Plan,
        sources: &[MemRef<'_, B::Memory>],
        dst: MemRef<'_, B::Memory>,
    ) -> Result<()> {
        self.tick("gather")?;
        self.inner.gather(stream, plan, sources, dst)
    }

    fn scatter(
        &self,
        stream: &B::Stream,
        plan: &B::Plan,
        src: MemRef<'_, B::Memory>,
        targets: &[MemRef<'_, B::Memory>],
    ) -> Result<()> {
        self.tick("scatter")?;
        self.inner.scatter(stream, plan, src, targets)
    }
}
