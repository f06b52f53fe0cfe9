//! NDSL's rotation rules (`rotate.py`) as views: a quarter turn is an axis swap plus one
//! negated stride, never a copy or an index array.

use crate::spec::Dim;
use gpubuf_core::{Layout, Result};

/// numpy's `rot90(data, k=1, axes=(a, b))` as a view: flip axis `b`, then swap `a` and `b`.
fn rot90(layout: &Layout, a: usize, b: usize) -> Result<Layout> {
    let mut perm: Vec<usize> = (0..layout.ndim()).collect();
    perm.swap(a, b);
    layout.flipped(b)?.permuted(&perm)
}

/// The view of `layout` (whose axes are `dims`) rotated `n_clockwise` quarter turns, with
/// NDSL's rules:
/// * 0: unchanged;
/// * 1: x and y present: `rot90(axes=(y, x))`; only x: x flipped; only y: unchanged;
/// * 3: x and y present: `rot90(axes=(x, y))`; only x: unchanged; only y: y flipped;
/// * 2: every horizontal axis reversed.
///
/// Non-horizontal axes are never touched. `n_clockwise` is taken modulo 4 (so -1 is 3).
///
/// # Errors
/// Only on inconsistent layouts.
pub fn rotate_scalar(layout: &Layout, dims: &[Dim], n_clockwise: i32) -> Result<Layout> {
    let n = n_clockwise.rem_euclid(4);
    // NDSL keeps the last axis of each kind it finds.
    let x = dims.iter().rposition(|d| d.is_x());
    let y = dims.iter().rposition(|d| d.is_y());
    match (n, x, y) {
        (1, Some(x), Some(y)) => rot90(layout, y, x),
        (3, Some(x), Some(y)) => rot90(layout, x, y),
        (1, Some(x), None) => layout.flipped(x),
        (3, None, Some(y)) => layout.flipped(y),
        (2, _, _) => {
            let mut l = layout.clone();
            for (ax, d) in dims.iter().enumerate() {
                if d.is_horizontal() {
                    l = l.flipped(ax)?;
                }
            }
            Ok(l)
        }
        _ => Ok(layout.clone()),
    }
}

/// For a vector rotated `n_clockwise` quarter turns (after each component was rotated as
/// a scalar), which component fills the first and second block, and whether it is negated
/// (NDSL's `rotate_vector_data`): 1 -> (y, -x), 2 -> (-x, -y), 3 -> (-y, x).
/// Component 0 is x, 1 is y.
pub fn vector_blocks(n_clockwise: i32) -> [(usize, bool); 2] {
    match n_clockwise.rem_euclid(4) {
        1 => [(1, false), (0, true)],
        2 => [(0, true), (1, true)],
        3 => [(1, true), (0, false)],
        _ => [(0, false), (1, false)],
    }
}
