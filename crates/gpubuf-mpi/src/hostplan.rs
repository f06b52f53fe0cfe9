//! Packing host quantities straight into memory that is not a gpubuf allocation (a
//! shared-memory window), and unpacking straight out of it: the CPU backend's quantities,
//! each allocation locked for the call, the transformer's copy plans run on the calling
//! thread by the CPU backend's executor (`gpubuf_cpu::run_plan_serial`).

use gpubuf_buffer::NDBuffer;
use gpubuf_core::{CopyPlan, DeviceMemory, Element, Error, Kernels, Result};
use gpubuf_cpu::CpuMemory;
use std::any::Any;

/// Runs `f` with every distinct allocation of `mems` locked, in ascending id order (the
/// CPU backend's lock order), collecting each one's first byte into `ptrs` (by position
/// in `mems`).
fn locked<R>(mems: &[&CpuMemory], ptrs: &mut Vec<*mut u8>, f: &mut dyn FnMut(&[*mut u8]) -> R) -> Result<R> {
    match mems.split_first() {
        None => Ok(f(ptrs)),
        Some((m, rest)) => m.with_bytes_mut(|bytes| {
            ptrs.push(bytes.as_mut_ptr());
            locked(rest, ptrs, f)
        })?,
    }
}

/// The CPU allocation of `q` and the byte offset in it of `q`'s first element, checked to
/// hold `need` elements inside `q`'s storage (a pooled buffer may share its allocation)
/// and to be element-aligned; `Ok(None)` when `q` is not CPU memory.
///
/// # Errors
/// [`Error::InvalidArgument`] for a quantity shorter than `need` (within its storage).
pub(crate) fn first_byte<B: Kernels, T: Element>(
    q: &NDBuffer<B, T>,
    need: usize,
) -> Result<Option<(&CpuMemory, usize)>> {
    let size = T::DTYPE.size();
    let storage = q.storage();
    let memory: &dyn Any = storage.memory;
    let Some(cpu) = memory.downcast_ref::<CpuMemory>() else { return Ok(None) };
    let first = q.layout().offset().checked_mul(size).and_then(|s| s.checked_add(storage.offset));
    let end = first.and_then(|s| need.checked_mul(size).and_then(|n| n.checked_add(s)));
    let limit = storage.offset.checked_add(storage.len).filter(|&l| l <= cpu.len());
    match (first, end, limit) {
        (Some(f), Some(e), Some(l)) if e <= l && f % size == 0 => Ok(Some((cpu, f))),
        _ => Err(Error::invalid("a quantity is shorter than its halo plan")),
    }
}

/// Runs `f` with each quantity's first element (by position in `quantities`), every
/// allocation locked for the call; `need[q]` elements from there must lie in quantity
/// `q`'s storage. `Ok(None)` when a quantity is not CPU memory or the element size is not
/// 1, 2, 4 or 8 bytes (`f` is not called).
///
/// # Errors
/// [`Error::InvalidArgument`] for a quantity shorter than `need` (within its storage),
/// fewer quantities than `need`, or a lock taken from inside a closure that holds it (see
/// `CpuMemory::with_bytes`).
pub(crate) fn with_quantities<B: Kernels, T: Element, R>(
    need: &[usize],
    quantities: &[&NDBuffer<B, T>],
    f: impl FnOnce(&[*mut u8]) -> R,
) -> Result<Option<R>> {
    let size = T::DTYPE.size();
    if ![1, 2, 4, 8].contains(&size) {
        return Ok(None);
    }
    // (allocation, element offset of the quantity's first element from its start)
    let mut parts: Vec<(&CpuMemory, usize)> = Vec::with_capacity(quantities.len());
    for (q, &need) in quantities.iter().zip(need) {
        let Some((cpu, first)) = first_byte(q, need)? else { return Ok(None) };
        parts.push((cpu, first / size));
    }
    if parts.len() != need.len() {
        return Err(Error::invalid("fewer quantities than the halo plan's sources"));
    }
    let mut mems: Vec<&CpuMemory> = parts.iter().map(|p| p.0).collect();
    mems.sort_by_key(|m| m.id());
    mems.dedup_by_key(|m| m.id());
    let mut f = Some(f);
    let mut go = |ptrs: &[*mut u8]| {
        // Each quantity's first element: its allocation's locked bytes plus its offset.
        let firsts: Vec<*mut u8> = parts
            .iter()
            .map(|&(mem, first)| {
                let at = mems.iter().position(|m| m.id() == mem.id()).unwrap_or(0);
                // In bounds: `first + need` elements lie in the allocation (checked above).
                ptrs[at].wrapping_add(first * size)
            })
            .collect();
        f.take().map(|f| f(&firsts))
    };
    locked(&mems, &mut Vec::with_capacity(mems.len()), &mut go)
}

/// Moves `plan` between the quantities (its sources, in order) and `buffer`: a gather
/// (quantities to buffer) or a scatter. `Ok(false)` when a quantity is not CPU memory or
/// the element size is not 1, 2, 4 or 8 bytes (nothing moved).
///
/// # Safety
/// `buffer` is valid for `plan.buffer_len()` elements of `T` (writes for a gather,
/// reads for a scatter), aligned for `T`, and nothing else accesses those bytes during the
/// call.
///
/// # Errors
/// As [`with_quantities`].
pub(crate) unsafe fn run<B: Kernels, T: Element>(
    plan: &CopyPlan,
    quantities: &[&NDBuffer<B, T>],
    buffer: *mut u8,
    gather: bool,
) -> Result<bool> {
    let moved = with_quantities(plan.source_lens(), quantities, |arrays| {
        // SAFETY: the plan is valid (boxes inside `need` elements of their source, buffer
        // ranges inside `buffer_len`), each source's elements lie in its locked allocation
        // (checked by `with_quantities`), allocations are aligned to 64 bytes and element
        // offsets to the element size; the buffer (valid, aligned, not a gpubuf allocation,
        // so disjoint from the quantities, and untouched by others) is the caller's promise.
        unsafe { gpubuf_cpu::run_plan_serial(plan, T::DTYPE, arrays, buffer, gather) }
    })?;
    Ok(moved.is_some())
}
