//! Packing host quantities straight into memory that is not a gpubuf allocation (a
//! shared-memory window), and unpacking straight out of it: the CPU backend's quantities,
//! each allocation locked for the call, walked serially by the transformer's copy plans.

use gpubuf_buffer::NDBuffer;
use gpubuf_core::{CopyPlan, DeviceMemory, Element, Error, Kernels, Result, Segment};
use gpubuf_cpu::CpuMemory;
use std::any::Any;

/// A machine word of one element size, negated as the plan's dtype says.
trait Word: Copy {
    fn negated(self, float: bool) -> Self;
}

macro_rules! word {
    ($($t:ty),*) => {$(
        impl Word for $t {
            fn negated(self, float: bool) -> Self {
                // Floats flip the sign bit (as `DType::negate_bytes`); integers negate in
                // two's complement.
                if float { self ^ (1 << (<$t>::BITS - 1)) } else { self.wrapping_neg() }
            }
        }
    )*};
}
word!(u8, u16, u32, u64);

/// Moves one segment between `array` (its source) and `buffer`.
///
/// # Safety
/// Every element of the segment's box lies inside the allocation `array` points into,
/// its buffer range inside `buffer`'s (a validated plan and long enough arrays make both
/// true), both aligned for `W`, valid for reads on the side read and writes on the side
/// written, and nothing else accesses the written bytes during the call.
unsafe fn segment<W: Word>(s: &Segment, float: bool, array: *mut W, buffer: *mut W, gather: bool) {
    let e = s.extents;
    // The buffer side is the box in C order; walk the array in memory order (largest
    // stride outermost), as the CPU backend does.
    let sb = [(e[1] * e[2] * e[3]) as isize, (e[2] * e[3]) as isize, e[3] as isize, 1];
    let mut order = [0usize, 1, 2, 3];
    order.sort_by_key(|&d| {
        if e[d] == 1 {
            (0, usize::MAX)
        } else {
            (1, usize::MAX - s.strides[d].unsigned_abs())
        }
    });
    let (ext, sa, sb) = (order.map(|d| e[d]), order.map(|d| s.strides[d]), order.map(|d| sb[d]));
    // Offsets stay inside the box and buffer range: they fit isize (CopyPlan::new).
    let (a0, b0) = (s.offset as isize, s.dst_offset as isize);
    for i in 0..ext[0] as isize {
        for j in 0..ext[1] as isize {
            for k in 0..ext[2] as isize {
                let a = a0 + i * sa[0] + j * sa[1] + k * sa[2];
                let b = b0 + i * sb[0] + j * sb[1] + k * sb[2];
                // SAFETY: the row's elements are elements of the box and of its buffer
                // range (the caller's contract).
                unsafe {
                    let (pa, pb) = (array.offset(a), buffer.offset(b));
                    if sa[3] == 1 && sb[3] == 1 && !s.negate {
                        let (from, to) = if gather { (pa, pb) } else { (pb, pa) };
                        std::ptr::copy_nonoverlapping(from, to, ext[3]);
                        continue;
                    }
                    for l in 0..ext[3] as isize {
                        let (x, y) = (pa.offset(l * sa[3]), pb.offset(l * sb[3]));
                        let (from, to) = if gather { (x, y) } else { (y, x) };
                        let v = from.read();
                        to.write(if s.negate { v.negated(float) } else { v });
                    }
                }
            }
        }
    }
}

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
/// [`Error::InvalidArgument`] for a quantity shorter than the plan's source (within its
/// storage), or a lock
/// taken from inside a closure that holds it (see `CpuMemory::with_bytes`).
pub(crate) unsafe fn run<B: Kernels, T: Element>(
    plan: &CopyPlan,
    quantities: &[&NDBuffer<B, T>],
    buffer: *mut u8,
    gather: bool,
) -> Result<bool> {
    let size = T::DTYPE.size();
    if ![1, 2, 4, 8].contains(&size) {
        return Ok(false);
    }
    // (allocation, element offset of the quantity's first element from its start)
    let mut parts: Vec<(&CpuMemory, usize)> = Vec::with_capacity(quantities.len());
    for (q, &need) in quantities.iter().zip(plan.source_lens()) {
        let storage = q.storage();
        let memory: &dyn Any = storage.memory;
        let Some(cpu) = memory.downcast_ref::<CpuMemory>() else { return Ok(false) };
        let skip = q.layout().offset().checked_mul(size).and_then(|s| s.checked_add(storage.offset));
        let end = skip.and_then(|s| need.checked_mul(size).and_then(|n| n.checked_add(s)));
        // Inside the quantity's storage (a pooled buffer may share its allocation).
        let limit = storage.offset.checked_add(storage.len).filter(|&l| l <= cpu.len());
        match (skip, end, limit) {
            (Some(s), Some(e), Some(l)) if e <= l && s % size == 0 => parts.push((cpu, s / size)),
            _ => return Err(Error::invalid("a quantity is shorter than its halo plan")),
        }
    }
    if parts.len() != plan.source_lens().len() {
        return Err(Error::invalid("fewer quantities than the halo plan's sources"));
    }
    let mut mems: Vec<&CpuMemory> = parts.iter().map(|p| p.0).collect();
    mems.sort_by_key(|m| m.id());
    mems.dedup_by_key(|m| m.id());
    let float = T::DTYPE.is_float();
    let mut go = |ptrs: &[*mut u8]| {
        for s in plan.segments().iter().filter(|s| !s.is_empty()) {
            let (mem, first) = parts[s.source];
            let Some(at) = mems.iter().position(|m| m.id() == mem.id()) else { continue };
            // In bounds: `first + need` elements lie in the allocation (checked above).
            let array = ptrs[at].wrapping_add(first * size);
            // SAFETY: the plan is valid (boxes inside `need` elements of their source,
            // buffer ranges inside `buffer_len`), the source's elements lie in its locked
            // allocation (checked above), allocations are aligned to 64 bytes and element
            // offsets to the element size; the buffer is the caller's promise.
            unsafe {
                match size {
                    1 => segment::<u8>(s, float, array, buffer, gather),
                    2 => segment::<u16>(s, float, array.cast(), buffer.cast(), gather),
                    4 => segment::<u32>(s, float, array.cast(), buffer.cast(), gather),
                    _ => segment::<u64>(s, float, array.cast(), buffer.cast(), gather),
                }
            }
        }
    };
    locked(&mems, &mut Vec::with_capacity(mems.len()), &mut go)?;
    Ok(true)
}
