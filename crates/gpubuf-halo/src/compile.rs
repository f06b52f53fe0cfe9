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
/// [`Error::InvalidArgument`] for an empty list or lists of different lengths;
/// [`Error::OutOfBounds`] for slices outside their array; [`Error::ShapeMismatch`] when
/// the unpack slices do not add up to the pack slices.
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
    for s in &all {
        s.check()?;
        lens.push(s.specification.span()?);
    }
    let (mut pack, mut unpack) = (Vec::new(), Vec::new());
    let (mut at, mut un_at) = (0usize, 0usize);
    for i in 0..n {
        let sx = &x[i];
        let turns = -sx.pack_clockwise_rotation;
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
    if un_at != at {
        return Err(Error::ShapeMismatch { expected: vec![at], got: vec![un_at] });
    }
    let pack = CopyPlan::new(lens.clone(), at, pack)?;
    let unpack = CopyPlan::new(lens, at, unpack)?;
    unpack.check_scatter()?;
    Ok(Compiled { pack, unpack })
}
