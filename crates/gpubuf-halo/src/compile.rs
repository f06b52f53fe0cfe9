//! Compiling exchange specs into the two copy plans of a transformer.
//!
//! Sources are the quantities in list order: x quantities `0..n`, then y quantities
//! `n..2n` for vectors. The pack plan reads each spec's pack slices, rotated by
//! `-pack_clockwise_rotation` (the receiver's axes turn the other way), into consecutive
//! buffer ranges in C order of the rotated view; a vector spec contributes its two blocks
//! in the order and with the signs of the component rule. The unpack plan writes the
//! buffer, unrotated, into each spec's unpack slices.

use crate::rotate::{rotate_scalar, vector_blocks};
use crate::spec::HaloExchangeSpec;
use gpubuf_core::{CopyPlan, Error, Result, Segment};

/// The compiled plans of a transformer.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// Gather: quantities -> pack buffer.
    pub pack: CopyPlan,
    /// Scatter: unpack buffer -> quantities.
    pub unpack: CopyPlan,
}

impl Compiled {
    /// Elements in each buffer.
    pub fn buffer_len(&self) -> usize {
        self.pack.buffer_len()
    }
}

/// Compiles `x` (and `y` for vectors) into pack and unpack plans.
///
/// # Errors
/// [`Error::InvalidArgument`] for an empty list, lists of different lengths, invalid
/// specs ([`QuantityHaloSpec::layout`](crate::QuantityHaloSpec::layout)) or element counts
/// that overflow; [`Error::OutOfBounds`] for slices outside their array;
/// [`Error::ShapeMismatch`] when the unpack slices do not add up to the pack slices;
/// [`Error::OutOfMemory`] when the plans would need more host memory than is available;
/// [`Error::InvalidPlan`] when the unpack slices write an element of one array twice.
pub fn compile(x: &[HaloExchangeSpec], y: Option<&[HaloExchangeSpec]>) -> Result<Compiled> {
    if x.is_empty() {
        return Err(Error::invalid("a halo transformer needs at least one exchange spec"));
    }
    if let Some(y) = y {
        if y.len() != x.len() {
            return Err(Error::invalid(format!("{} x specs but {} y specs", x.len(), y.len())));
        }
    }
    let n = x.len();
    let all: Vec<&HaloExchangeSpec> = x.iter().chain(y.into_iter().flatten()).collect();
    let mut lens = Vec::with_capacity(all.len());
    let (mut total, mut un_total) = (0usize, 0usize);
    let too_many = || Error::invalid("halo exchange specs move more than usize::MAX elements");
    for s in &all {
        s.check()?;
        lens.push(s.specification.span()?);
        total = total.checked_add(s.pack_size()?).ok_or_else(too_many)?;
        un_total = un_total.checked_add(s.unpack_size()?).ok_or_else(too_many)?;
    }
    if un_total != total {
        return Err(Error::ShapeMismatch { expected: vec![total], got: vec![un_total] });
    }
    check_host_memory(total)?;
    let (mut pack, mut unpack) = (Vec::new(), Vec::new());
    // Both running offsets stay within `total`, checked above.
    let (mut at, mut un_at) = (0usize, 0usize);
    for i in 0..n {
        let sx = &x[i];
        // The receiver's axes turn the other way; i32::MIN has no negation but is 0 mod 4.
        let turns = (4 - sx.pack_clockwise_rotation.rem_euclid(4)) % 4;
        let view = |s: &HaloExchangeSpec| -> Result<gpubuf_core::Layout> {
            let l = s.specification.layout()?.sliced(&s.pack_slices)?;
            rotate_scalar(&l, &s.specification.dims, turns)
        };
        match y {
            None => {
                let l = view(sx)?;
                pack.extend(Segment::from_layout(i, &l, at)?);
                at += l.size();
            }
            Some(y) => {
                let views = [view(sx)?, view(&y[i])?];
                for (component, negate) in vector_blocks(turns) {
                    let l = &views[component];
                    let src = if component == 0 { i } else { n + i };
                    pack.extend(Segment::from_layout(src, l, at)?.into_iter().map(|s| s.negated(negate)));
                    at += l.size();
                }
            }
        }
        let targets: Vec<(usize, &HaloExchangeSpec)> = match y {
            None => vec![(i, sx)],
            Some(y) => vec![(i, sx), (n + i, &y[i])],
        };
        for (src, s) in targets {
            let l = s.specification.layout()?.sliced(&s.unpack_slices)?;
            unpack.extend(Segment::from_layout(src, &l, un_at)?);
            un_at += l.size();
        }
    }
    let pack = CopyPlan::new(lens.clone(), at, pack)?;
    let unpack = CopyPlan::new(lens, at, unpack)?;
    unpack.check_scatter()?;
    Ok(Compiled { pack, unpack })
}

/// Bytes of host memory compiling and checking plans may use per element moved (segment
/// lists, and the scatter check's sorted indices or bitset).
const HOST_BYTES_PER_ELEMENT: usize = 16;

/// Refuses plans whose construction alone would need more host memory than the machine has
/// available (`MemAvailable` on Linux; no limit where it cannot be read), so a huge spec is
/// an [`Error::OutOfMemory`] instead of an aborted allocation.
fn check_host_memory(elements: usize) -> Result<()> {
    let requested = elements.saturating_mul(HOST_BYTES_PER_ELEMENT);
    match host_available() {
        Some(available) if requested > available => {
            Err(Error::OutOfMemory { requested, available: Some(available), pool: None })
        }
        _ => Ok(()),
    }
}

/// Host memory available now, in bytes, when the system says.
fn host_available() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib = line.split_whitespace().nth(1)?.parse::<usize>().ok()?;
    Some(kib.saturating_mul(1024))
}
