//! [`Phases`]: where a halo updater's time goes, accumulated over its updates.

use std::time::{Duration, Instant};

/// Time spent by one rank in each phase of its halo updates so far
/// ([`crate::HaloUpdater::phases`]), summed over `updates` completed updates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phases {
    /// Updates completed by a successful `wait`.
    pub updates: usize,
    /// Starting the receives and checking the quantities (`start` before the first pack).
    pub post: Duration,
    /// Packing every neighbour's message, synchronising the pack and staging it on the
    /// host where it is not handed to MPI in place.
    pub pack: Duration,
    /// Starting the sends (`MPI_Start`).
    pub send: Duration,
    /// Waiting for receives (`MPI_Waitany`), the time no arrived message was left to unpack.
    pub wait: Duration,
    /// Unpacking the arrived messages (and copying staged ones to the device).
    pub unpack: Duration,
    /// Completing the sends and synchronising the unpacks at the end of `wait`.
    pub complete: Duration,
}

impl Phases {
    /// The sum of every phase.
    pub fn total(&self) -> Duration {
        self.post + self.pack + self.send + self.wait + self.unpack + self.complete
    }

    /// Mean microseconds per update of each phase, in the order post, pack, send, wait,
    /// unpack, complete (zeros before the first update).
    pub fn mean_us(&self) -> [f64; 6] {
        let n = self.updates.max(1) as f64;
        [self.post, self.pack, self.send, self.wait, self.unpack, self.complete]
            .map(|d| d.as_secs_f64() * 1e6 / n)
    }
}

impl Phases {
    /// Adds the phases of one completed update.
    pub(crate) fn add_update(&mut self, one: &Phases) {
        self.updates = self.updates.saturating_add(1);
        for (sum, add) in [
            (&mut self.post, one.post),
            (&mut self.pack, one.pack),
            (&mut self.send, one.send),
            (&mut self.wait, one.wait),
            (&mut self.unpack, one.unpack),
            (&mut self.complete, one.complete),
        ] {
            *sum = sum.saturating_add(add);
        }
    }
}

/// Adds the time since `since` to `slot` and returns now.
pub(crate) fn lap(slot: &mut Duration, since: Instant) -> Instant {
    let now = Instant::now();
    *slot = slot.saturating_add(now.saturating_duration_since(since));
    now
}
