//! The ways an updater's messages can travel in these tests, and the node-shared
//! quantities of the single-copy path.

use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Error, Kernels, Order, Result};
use gpubuf_mpi::{node_buffer, HaloUpdater};

/// How the updaters of a case are made and where its quantities live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// [`HaloUpdater::new`]: every message through MPI.
    Messages,
    /// [`HaloUpdater::on_node`] with ordinary quantities: packed into the receiver's slot.
    Window,
    /// [`HaloUpdater::on_node`] with every rank's quantities in node-shared memory: halos
    /// copied straight from the neighbours' quantities.
    Node,
    /// As `Node` on even ranks, as `Window` on odd ones: each link carries both kinds of
    /// message, one each way.
    Mixed,
}

impl Mode {
    /// Whether the updaters are made with `on_node`.
    pub fn shared(self) -> bool {
        self != Mode::Messages
    }

    /// Whether `rank`'s quantities live in node-shared memory.
    pub fn node_memory(self, rank: usize) -> bool {
        self == Mode::Node || (self == Mode::Mixed && rank % 2 == 0)
    }

    /// `a` itself, or a copy of it in node-shared memory when `rank`'s quantities live there.
    pub fn place<B: Kernels + 'static>(
        self,
        b: &B,
        rank: usize,
        a: NDBuffer<B, f64>,
    ) -> Result<NDBuffer<B, f64>>
    where
        B::Memory: 'static,
    {
        if !self.node_memory(rank) {
            return Ok(a);
        }
        let n = node_buffer::<B, f64>(b, a.shape(), Order::C, None)?;
        n.copy_from(&a)?;
        Ok(n)
    }
}

/// Checks that `up` (of rank `me`) received in one copy exactly the messages of its
/// neighbours whose quantities are node-shared memory (host memory only; none on device
/// backends; never from itself, a rank that is its own neighbour), over `updates` updates.
pub fn expect_copied<B: Kernels, T: gpubuf_core::Element>(
    up: &HaloUpdater<'_, B, T>,
    me: usize,
    mode: Mode,
    updates: usize,
) -> Result<()> {
    let host = B::KIND == gpubuf_core::BackendKind::Cpu;
    let want: usize = up
        .message_bytes()
        .iter()
        .filter(|&&(rank, _)| host && rank != me && mode.shared() && mode.node_memory(rank))
        .map(|&(_, bytes)| bytes * updates)
        .sum();
    if up.copied_bytes() != want {
        return Err(Error::invalid(format!(
            "{} backend, {mode:?}: {} bytes copied straight from neighbours, want {want}",
            B::KIND.name(),
            up.copied_bytes()
        )));
    }
    Ok(())
}
