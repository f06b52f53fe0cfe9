//! The backend traits for [`Device`]: each call matches on the held backend, takes that
//! backend's own types out of the argument enums (a different backend's is
//! [`Error::DeviceMismatch`]) and calls it.

use super::parts::{mismatch, Event, Memory, Plan, Stream, Variant};
use super::{Device, Inner};
use gpubuf_core::{
    Allocator, Backend, BackendKind, CopyPlan, DType, DeviceInfo, Kernels, MemRef, MemoryInfo, Result,
};
use std::any::Any;
use std::sync::Arc;

/// Runs `$body` with `$b` bound to the held backend, typed as itself.
macro_rules! each {
    ($dev:expr, $b:ident => $body:expr) => {
        match &$dev.shared.inner {
            Inner::Cpu($b) => $body,
            #[cfg(feature = "opencl")]
            Inner::OpenCl($b) => $body,
            #[cfg(feature = "cuda")]
            Inner::Cuda($b) => $body,
        }
    };
}

#[inline]
fn memory<'m, B: Variant>(_: &B, m: &'m Memory) -> Result<&'m B::Memory> {
    match B::memory(m) {
        Some(x) => Ok(x),
        None => Err(mismatch("an allocation", m.kind(), B::KIND)),
    }
}

#[inline]
fn stream<'s, B: Variant>(_: &B, s: &'s Stream) -> Result<&'s B::Stream> {
    match B::stream(s) {
        Some(x) => Ok(x),
        None => Err(mismatch("a stream", s.kind(), B::KIND)),
    }
}

#[inline]
fn event<'e, B: Variant>(_: &B, e: &'e Event) -> Result<&'e B::Event> {
    match B::event(e) {
        Some(x) => Ok(x),
        None => Err(mismatch("an event", e.kind(), B::KIND)),
    }
}

#[inline]
fn plan<'p, B: Variant>(_: &B, p: &'p Plan) -> Result<&'p B::Plan> {
    match B::plan(p) {
        Some(x) => Ok(x),
        None => Err(mismatch("a prepared plan", p.kind(), B::KIND)),
    }
}

#[inline]
fn range<'a, B: Variant>(b: &B, r: MemRef<'a, Memory>) -> Result<MemRef<'a, B::Memory>> {
    Ok(MemRef { memory: memory(b, r.memory)?, offset: r.offset, len: r.len })
}

/// Ranges passed in one call without a heap allocation up to this many.
const STACK_RANGES: usize = 16;

/// Calls `f` with `ranges` narrowed to backend `B` (on the stack for up to
/// [`STACK_RANGES`] ranges), or fails before calling it when one belongs elsewhere.
#[inline]
fn with_ranges<'a, B: Variant, R>(
    b: &B,
    ranges: &[MemRef<'a, Memory>],
    f: impl FnOnce(&[MemRef<'a, B::Memory>]) -> Result<R>,
) -> Result<R> {
    let Some(&first) = ranges.first() else { return f(&[]) };
    let first = range(b, first)?;
    if ranges.len() <= STACK_RANGES {
        let mut narrowed = [first; STACK_RANGES];
        for (slot, &r) in narrowed.iter_mut().zip(ranges).skip(1) {
            *slot = range(b, r)?;
        }
        f(&narrowed[..ranges.len()])
    } else {
        let narrowed: Vec<_> = ranges.iter().map(|&r| range(b, r)).collect::<Result<_>>()?;
        f(&narrowed)
    }
}

impl Allocator for Device {
    type Memory = Memory;

    #[inline]
    fn allocate(&self, bytes: usize) -> Result<Memory> {
        each!(self, b => wrap_memory(b, b.allocate(bytes)))
    }

    #[inline]
    fn allocate_immediate(&self, bytes: usize) -> Result<Memory> {
        each!(self, b => wrap_memory(b, b.allocate_immediate(bytes)))
    }

    #[inline]
    fn memory_info(&self) -> Option<MemoryInfo> {
        each!(self, b => b.memory_info())
    }
}

#[inline]
fn wrap_memory<B: Variant>(_: &B, m: Result<B::Memory>) -> Result<Memory> {
    m.map(B::wrap_memory)
}

#[inline]
fn wrap_stream<B: Variant>(_: &B, s: Result<B::Stream>) -> Result<Stream> {
    s.map(B::wrap_stream)
}

#[inline]
fn wrap_one_event<B: Variant>(_: &B) -> fn(B::Event) -> Event {
    B::wrap_event
}

#[inline]
fn wrap_event<B: Variant>(_: &B, e: Result<B::Event>) -> Result<Event> {
    e.map(B::wrap_event)
}

#[inline]
fn wrap_plan<B: Variant>(_: &B, p: Result<B::Plan>) -> Result<Plan> {
    p.map(B::wrap_plan)
}

fn gather<B: Variant>(
    b: &B,
    s: &Stream,
    p: &Plan,
    sources: &[MemRef<'_, Memory>],
    dst: MemRef<'_, Memory>,
) -> Result<()> {
    let (s, p, dst) = (stream(b, s)?, plan(b, p)?, range(b, dst)?);
    with_ranges(b, sources, |sources| b.gather(s, p, sources, dst))
}

fn scatter<B: Variant>(
    b: &B,
    s: &Stream,
    p: &Plan,
    src: MemRef<'_, Memory>,
    targets: &[MemRef<'_, Memory>],
) -> Result<()> {
    let (s, p, src) = (stream(b, s)?, plan(b, p)?, range(b, src)?);
    with_ranges(b, targets, |targets| b.scatter(s, p, src, targets))
}

impl Backend for Device {
    type Stream = Stream;
    type Event = Event;

    /// A constant of the type, so it cannot follow the value: use [`Backend::kind`].
    const KIND: BackendKind = BackendKind::Cpu;

    #[inline]
    fn kind(&self) -> BackendKind {
        Device::kind(self)
    }

    #[inline]
    fn info(&self) -> DeviceInfo {
        each!(self, b => b.info())
    }

    /// The held backend's own allocation, shared, when `target` is that backend's handle
    /// for the same device.
    fn memory_to<B2: Backend>(&self, memory: &Arc<Memory>, target: &B2) -> Option<Arc<B2::Memory>> {
        each!(self, b => share_to(b, memory, target))
    }

    /// An allocation of the held backend's own handle type, wrapped without a copy, when
    /// `source` is that handle for the same device.
    fn memory_from<B1: Backend>(&self, source: &B1, memory: &Arc<B1::Memory>) -> Option<Arc<Memory>> {
        each!(self, b => share_from(b, source, memory))
    }

    #[inline]
    /// Whether both hold the same backend and it says they share a device.
    fn same_device(&self, other: &Self) -> bool {
        match (&self.shared.inner, &other.shared.inner) {
            (Inner::Cpu(a), Inner::Cpu(b)) => a.same_device(b),
            #[cfg(feature = "opencl")]
            (Inner::OpenCl(a), Inner::OpenCl(b)) => a.same_device(b),
            #[cfg(feature = "cuda")]
            (Inner::Cuda(a), Inner::Cuda(b)) => a.same_device(b),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    #[inline]
    fn default_stream(&self) -> &Stream {
        &self.shared.default_stream
    }

    #[inline(always)]
    /// The held backend's number for the stream. A stream of another backend gets
    /// `u64::MAX`, a number no stream of the held backend is given first.
    fn stream_id(&self, s: &Stream) -> u64 {
        each!(self, b => stream(b, s).map_or(u64::MAX, |s| b.stream_id(s)))
    }

    #[inline]
    fn new_stream(&self) -> Result<Stream> {
        each!(self, b => wrap_stream(b, b.new_stream()))
    }

    #[inline]
    fn write(&self, s: &Stream, dst: &Memory, offset: usize, src: &[u8]) -> Result<()> {
        each!(self, b => b.write(stream(b, s)?, memory(b, dst)?, offset, src))
    }

    #[inline]
    fn read(&self, s: &Stream, src: &Memory, offset: usize, dst: &mut [u8]) -> Result<()> {
        each!(self, b => b.read(stream(b, s)?, memory(b, src)?, offset, dst))
    }

    #[inline]
    fn copy(&self, s: &Stream, src: MemRef<'_, Memory>, dst: &Memory, dst_offset: usize) -> Result<()> {
        each!(self, b => b.copy(stream(b, s)?, range(b, src)?, memory(b, dst)?, dst_offset))
    }

    #[inline]
    fn fill(&self, s: &Stream, dst: MemRef<'_, Memory>, pattern: &[u8]) -> Result<()> {
        each!(self, b => b.fill(stream(b, s)?, range(b, dst)?, pattern))
    }

    #[inline(always)]
    fn record_event(&self, s: &Stream) -> Result<Event> {
        each!(self, b => wrap_event(b, b.record_event(stream(b, s)?)))
    }

    #[inline(always)]
    fn record_pending(&self, s: &Stream) -> Result<Option<Event>> {
        each!(self, b => b.record_pending(stream(b, s)?).map(|e| e.map(wrap_one_event(b))))
    }

    #[inline(always)]
    fn event_complete(&self, e: &Event) -> Result<bool> {
        each!(self, b => b.event_complete(event(b, e)?))
    }

    #[inline]
    fn wait_event(&self, e: &Event) -> Result<()> {
        each!(self, b => b.wait_event(event(b, e)?))
    }

    #[inline]
    fn stream_wait(&self, s: &Stream, e: &Event) -> Result<()> {
        each!(self, b => b.stream_wait(stream(b, s)?, event(b, e)?))
    }

    #[inline]
    fn synchronize(&self, s: &Stream) -> Result<()> {
        each!(self, b => b.synchronize(stream(b, s)?))
    }
}

impl Kernels for Device {
    type Plan = Plan;

    #[inline]
    fn prepare(&self, p: &CopyPlan, dtype: DType) -> Result<Plan> {
        each!(self, b => wrap_plan(b, b.prepare(p, dtype)))
    }

    #[inline]
    fn gather(
        &self,
        s: &Stream,
        p: &Plan,
        sources: &[MemRef<'_, Memory>],
        dst: MemRef<'_, Memory>,
    ) -> Result<()> {
        each!(self, b => gather(b, s, p, sources, dst))
    }

    #[inline]
    fn scatter(
        &self,
        s: &Stream,
        p: &Plan,
        src: MemRef<'_, Memory>,
        targets: &[MemRef<'_, Memory>],
    ) -> Result<()> {
        each!(self, b => scatter(b, s, p, src, targets))
    }
}

/// `memory` (of `held`, a device's backend) as `target`'s allocation type, when `target` is
/// `held`'s own type for the same device.
fn share_to<X: Variant, B2: Backend>(held: &X, memory: &Memory, target: &B2) -> Option<Arc<B2::Memory>> {
    let target = (target as &dyn Any).downcast_ref::<X>()?;
    if !held.same_device(target) {
        return None;
    }
    let shared: Box<dyn Any> = Box::new(X::shared_memory(memory)?.clone());
    shared.downcast::<Arc<B2::Memory>>().ok().map(|b| *b)
}

/// `memory` of `source` wrapped as a device allocation, when `source` is `held`'s own type
/// for the same device.
fn share_from<X: Variant, B1: Backend>(
    held: &X,
    source: &B1,
    memory: &Arc<B1::Memory>,
) -> Option<Arc<Memory>> {
    let source = (source as &dyn Any).downcast_ref::<X>()?;
    if !held.same_device(source) {
        return None;
    }
    let own = (memory as &dyn Any).downcast_ref::<Arc<X::Memory>>()?;
    Some(Arc::new(X::wrap_shared(own.clone())))
}
