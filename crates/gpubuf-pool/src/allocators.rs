//! pyopencl's two allocator flavours over any gpubuf [`Allocator`].

use gpubuf_core::{Allocator, MemoryInfo, Result};

/// Memory that really exists when `allocate` returns (pyopencl's `ImmediateAllocator`):
/// every allocation goes through [`Allocator::allocate_immediate`], which touches or
/// migrates it. Implementations such as PoCL otherwise back buffers lazily, so an
/// out-of-memory would surface later, at first use.
#[derive(Debug, Clone)]
pub struct ImmediateAllocator<A>(pub A);

/// Memory that may be backed lazily (pyopencl's `DeferredAllocator`): plain
/// [`Allocator::allocate`].
#[derive(Debug, Clone)]
pub struct DeferredAllocator<A>(pub A);

impl<A: Allocator> Allocator for ImmediateAllocator<A> {
    type Memory = A::Memory;

    fn allocate(&self, bytes: usize) -> Result<A::Memory> {
        self.0.allocate_immediate(bytes)
    }

    fn allocate_immediate(&self, bytes: usize) -> Result<A::Memory> {
        self.0.allocate_immediate(bytes)
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        self.0.memory_info()
    }
}

impl<A: Allocator> Allocator for DeferredAllocator<A> {
    type Memory = A::Memory;

    fn allocate(&self, bytes: usize) -> Result<A::Memory> {
        self.0.allocate(bytes)
    }

    fn allocate_immediate(&self, bytes: usize) -> Result<A::Memory> {
        self.0.allocate(bytes)
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        self.0.memory_info()
    }
}
