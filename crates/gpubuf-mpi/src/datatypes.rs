//! Halo messages as MPI derived datatypes (host memory): MPI gathers a message straight
//! from the sender's quantities and scatters it straight into the receiver's halos, with
//! no pack or unpack buffer. Each side's blocks come from the link transformer's compiled
//! plan (its pack plan for the sender, its unpack plan for the receiver), as runs
//! contiguous both in a quantity and in the message, in message order; the type is an
//! `MPI_Type_create_hindexed` of `MPI_UINT8_T` at absolute addresses (used with
//! `MPI_BOTTOM`), so its type signature is the packed message's (`len` bytes of
//! `MPI_UINT8_T`) and either side may use a datatype or a buffer independently.

use crate::hostplan::first_byte;
use crate::runs::{pack_runs, RUN_WORDS};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{CopyPlan, Element, Error, Kernels, Result};
use mpi::ffi::{self, MPI_Aint, MPI_Datatype};
use std::ffi::c_int;

/// The environment variable that switches the datatype path on (`1`) or off (`0`) for
/// updaters made afterwards (unset: on, which measured faster with Open MPI's shared
/// memory transport and no slower over TCP; see `docs/mpi.md`).
/// [`crate::HaloUpdater::set_datatypes`] sets it per updater afterwards.
///
/// Its value when an updater is made also decides negation at the receiver (see
/// `docs/mpi.md`): where it is on for both ranks of a link (and both hold host memory
/// moved in place, outside the node's window, with a non-complex, non-bool element type
/// of 1 to 8 bytes, and MPI can move both sides as datatypes), a vector component that
/// crosses a rotated edge travels raw and its receiver negates it in place; otherwise
/// its sender negates it while packing. That choice stays for the updater's life.
pub const DATATYPES_ENV: &str = "GPUBUF_MPI_DATATYPES";

/// Whether updaters use datatypes when [`DATATYPES_ENV`] is unset.
pub(crate) const DEFAULT: bool = true;

/// A side whose runs average fewer bytes than this keeps the pack path (MPI's gather of
/// many tiny blocks is slower than the pack kernel).
pub(crate) const MIN_MEAN_BLOCK: usize = 64;

/// The datatype switch from the environment.
///
/// # Errors
/// [`Error::InvalidArgument`] for a value other than `0` or `1`.
pub(crate) fn from_env() -> Result<bool> {
    match std::env::var(DATATYPES_ENV) {
        Err(_) => Ok(DEFAULT),
        Ok(v) if v == "1" => Ok(true),
        Ok(v) if v == "0" => Ok(false),
        Ok(v) => Err(Error::invalid(format!("{DATATYPES_ENV}={v:?}: expected 0 or 1"))),
    }
}

/// One side of a link as blocks: `(quantity, byte offset from its first element, bytes)`
/// in message order, covering the message exactly once, with the elements each quantity
/// must hold (the plan's source lengths).
pub(crate) struct Side {
    blocks: Vec<(usize, usize, usize)>,
    need: Vec<usize>,
    /// The quantities' first-element addresses the link's datatype request was made for.
    pub(crate) key: Option<Vec<usize>>,
}

impl Side {
    /// The blocks of `plan` for elements of `size` bytes, or `None` when the plan negates
    /// (vector components across rotated edges), is empty, is too fragmented (runs of
    /// fewer than [`MIN_MEAN_BLOCK`] bytes on average), or reaches an element twice.
    pub(crate) fn new(plan: &CopyPlan, size: usize) -> Option<Side> {
        if plan.buffer_len() == 0 || plan.segments().iter().any(|s| s.negate) {
            return None;
        }
        let runs = pack_runs(plan);
        let mut runs: Vec<&[u64]> = runs.chunks_exact(RUN_WORDS).collect();
        runs.sort_by_key(|r| r[2]);
        let need = plan.source_lens().to_vec();
        let mut blocks = Vec::with_capacity(runs.len());
        let mut pos = 0usize;
        for r in runs {
            let n = |v: u64| usize::try_from(v).ok();
            let (q, at, at_msg, len) = (n(r[0])?, n(r[1])?, n(r[2])?, n(r[3])?);
            // In message order with no gap or overlap, inside the quantity's elements.
            let end = at.checked_add(len)?;
            if at_msg != pos || len == 0 || end > *need.get(q)? {
                return None;
            }
            pos = pos.checked_add(len)?;
            blocks.push((q, at.checked_mul(size)?, len.checked_mul(size)?));
        }
        let bytes = pos.checked_mul(size)?;
        if pos != plan.buffer_len()
            || bytes / blocks.len() < MIN_MEAN_BLOCK
            || blocks.len() > c_int::MAX as usize
        {
            return None;
        }
        // A receive's type must not name a byte twice (MPI leaves such a receive
        // undefined): a plan that writes an element twice keeps its buffer.
        let mut spans: Vec<(usize, usize, usize)> = blocks.clone();
        spans.sort_unstable();
        if spans.windows(2).any(|w| w[0].0 == w[1].0 && w[0].1.checked_add(w[0].2).is_none_or(|e| e > w[1].1))
        {
            return None;
        }
        Some(Side { blocks, need, key: None })
    }

    /// The address of each quantity's first element, each checked to hold the elements
    /// the plan reaches (inside its storage); `Ok(None)` when a quantity is not CPU memory
    /// or the list is not the plan's sources.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a quantity shorter than its plan.
    pub(crate) fn bases<B: Kernels, T: Element>(&self, q: &[&NDBuffer<B, T>]) -> Result<Option<Vec<usize>>> {
        if q.len() != self.need.len() {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(q.len());
        for (q, &need) in q.iter().zip(&self.need) {
            let Some((cpu, first)) = first_byte(q, need)? else { return Ok(None) };
            let at = (cpu.as_ptr() as usize).checked_add(first);
            out.push(at.ok_or_else(|| Error::invalid("a quantity past the address space"))?);
        }
        Ok(Some(out))
    }

    /// The committed datatype of this side for quantities whose first elements lie at
    /// `bases` (from [`Side::bases`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a wrong base count or an address past `MPI_Aint`;
    /// MPI errors.
    pub(crate) fn datatype(&self, bases: &[usize]) -> Result<Datatype> {
        if bases.len() != self.need.len() {
            return Err(Error::invalid("datatype bases for another quantity list"));
        }
        let mut lens: Vec<c_int> = Vec::with_capacity(self.blocks.len());
        let mut displs: Vec<MPI_Aint> = Vec::with_capacity(self.blocks.len());
        for &(q, off, len) in &self.blocks {
            let at = bases[q].checked_add(off).and_then(|a| MPI_Aint::try_from(a).ok());
            displs.push(at.ok_or_else(|| Error::invalid("a halo block past MPI's address range"))?);
            // A block lies in a message of at most i32::MAX bytes.
            lens.push(
                c_int::try_from(len).map_err(|_| Error::invalid("a halo block longer than MPI counts"))?,
            );
        }
        // SAFETY: reads an immutable handle constant of the MPI library.
        let mut ty = unsafe { ffi::RSMPI_DATATYPE_NULL };
        // SAFETY: `lens` and `displs` hold `blocks.len()` (at most c_int::MAX, checked in
        // `new`) entries each; MPI reads them and writes `ty`. Making a type touches no
        // memory at the displacements.
        let code = unsafe {
            ffi::MPI_Type_create_hindexed(
                lens.len() as c_int,
                lens.as_ptr(),
                displs.as_ptr(),
                ffi::RSMPI_UINT8_T,
                &mut ty,
            )
        };
        check(code, "MPI_Type_create_hindexed")?;
        let mut ty = Datatype(ty);
        // SAFETY: a type just created, committed in place (freed by `ty` on failure).
        check(unsafe { ffi::MPI_Type_commit(&mut ty.0) }, "MPI_Type_commit")?;
        Ok(ty)
    }
}

fn check(code: c_int, what: &str) -> Result<()> {
    if code == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(Error::invalid(format!("{what} failed with MPI error code {code}")))
    }
}

/// A derived datatype, freed (`MPI_Type_free`) on drop.
pub(crate) struct Datatype(MPI_Datatype);

impl Datatype {
    /// The handle.
    pub(crate) fn raw(&self) -> MPI_Datatype {
        self.0
    }
}

impl Drop for Datatype {
    fn drop(&mut self) {
        // SAFETY: a type this value created, freed once; the requests made with it are
        // freed before it (see `Requests`).
        unsafe { ffi::MPI_Type_free(&mut self.0) };
    }
}

/// The datatype sides of a link (`None`: that side packs or unpacks through a buffer).
#[derive(Default)]
pub(crate) struct Typed {
    /// The sender's side (from the pack plan).
    pub(crate) send: Option<Side>,
    /// The receiver's side (from the unpack plan).
    pub(crate) recv: Option<Side>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpubuf_core::Segment;

    /// Two quantities of 10x16 f64 (row-major); the message holds rows 1..3 of quantity 1,
    /// then columns 0..8 of row 5 of quantity 0.
    fn plan(negate: bool) -> CopyPlan {
        let a = Segment::new(1, 16, &[(2, 16), (16, 1)], 0).unwrap();
        let b = Segment::new(0, 80, &[(8, 1)], 32).unwrap().negated(negate);
        CopyPlan::new(vec![160, 160], 40, vec![a, b]).unwrap()
    }

    #[test]
    fn blocks_follow_the_message_in_bytes() {
        let side = Side::new(&plan(false), 8).expect("eligible");
        // Rows 1 and 2 of quantity 1 merge into one run (contiguous in both).
        assert_eq!(side.blocks, vec![(1, 128, 256), (0, 640, 64)]);
        assert_eq!(side.need, vec![160, 160]);
    }

    #[test]
    fn negation_and_short_runs_keep_the_buffer() {
        assert!(Side::new(&plan(true), 8).is_none());
        // One f32 column of 2-element runs: 8-byte blocks on average.
        let col = Segment::new(0, 0, &[(10, 16), (2, 1)], 0).unwrap();
        let plan = CopyPlan::new(vec![160], 20, vec![col]).unwrap();
        assert!(Side::new(&plan, 4).is_none());
        // Two 16-element runs over the same row: one element reached twice.
        let a = Segment::new(0, 0, &[(16, 1)], 0).unwrap();
        let b = Segment::new(0, 0, &[(16, 1)], 16).unwrap();
        let twice = CopyPlan::new(vec![160], 32, vec![a, b]).unwrap();
        assert!(Side::new(&twice, 8).is_none());
    }
}
