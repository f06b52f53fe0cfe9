//! An OpenCL-style [`Launch`] (work-items per dimension, optional work-group size) as a
//! CUDA grid and block: dimension 0 is `x`, 1 is `y`, 2 is `z`.
//!
//! Exactly the launch's work-items run, as on OpenCL: the block divides the global size in
//! every dimension. Without a local size the block is chosen from the divisors of the
//! global sizes: at least what keeps the grid within the device's limits, then grown
//! towards [`TARGET_BLOCK`] threads. A global size with no divisor in range (a large prime)
//! gets small blocks: round it up to a multiple of 32 and test the index in the kernel,
//! or give a local size.

use gpubuf_core::kernel::Launch;
use gpubuf_core::{Error, Result};

/// Threads per block aimed for when the launch gives no local size.
pub const TARGET_BLOCK: usize = 256;

/// The device and kernel limits a launch is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Threads per block of this kernel (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`, at most
    /// the device's).
    pub max_threads: usize,
    /// Block size per dimension (`CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X/Y/Z`).
    pub max_block: [usize; 3],
    /// Grid size per dimension (`CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X/Y/Z`).
    pub max_grid: [usize; 3],
}

/// A grid (blocks per dimension) and a block (threads per dimension), `x, y, z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Blocks per dimension.
    pub grid: (u32, u32, u32),
    /// Threads per dimension.
    pub block: (u32, u32, u32),
}

/// The largest divisor of `n` that is at most `cap` (1 when `cap` is 0).
fn largest_divisor(n: usize, cap: usize) -> usize {
    (1..=cap.min(n)).rev().find(|d| n % d == 0).unwrap_or(1)
}

/// The smallest divisor of `n` in `need..=cap`.
fn smallest_divisor(n: usize, need: usize, cap: usize) -> Option<usize> {
    (need.max(1)..=cap.min(n)).find(|d| n % d == 0)
}

/// The grid and block for `launch` under `limits`.
///
/// # Errors
/// [`Error::InvalidArgument`] when the block has more threads than the kernel takes, a
/// block or grid dimension is over the device's limit, or (without a local size) no block
/// that divides the global sizes keeps the grid within the limits.
pub fn geometry(launch: &Launch, limits: &Limits) -> Result<Geometry> {
    let global = launch.global();
    let dims = global.len();
    let block: Vec<usize> = match launch.local() {
        Some(local) => {
            let threads = launch.group_size().unwrap_or(1);
            if threads > limits.max_threads {
                return Err(Error::invalid(format!(
                    "a block of {threads} threads ({local:?}), the kernel takes at most {}",
                    limits.max_threads
                )));
            }
            if let Some(d) = (0..dims).find(|&d| local[d] > limits.max_block[d]) {
                return Err(Error::invalid(format!(
                    "local size {} in dimension {d}, the device takes at most {}",
                    local[d], limits.max_block[d]
                )));
            }
            local.to_vec()
        }
        None => choose_block(global, limits)?,
    };
    let mut grid = [1usize; 3];
    let mut threads = [1usize; 3];
    for d in 0..dims {
        grid[d] = global[d] / block[d];
        threads[d] = block[d];
        if grid[d] > limits.max_grid[d] {
            return Err(Error::invalid(format!(
                "global size {} in dimension {d} needs {} blocks of {}, the device takes at most {}",
                global[d], grid[d], block[d], limits.max_grid[d]
            )));
        }
    }
    let u = |v: usize| u32::try_from(v).map_err(|_| Error::invalid(format!("launch size {v} exceeds u32")));
    Ok(Geometry {
        grid: (u(grid[0])?, u(grid[1])?, u(grid[2])?),
        block: (u(threads[0])?, u(threads[1])?, u(threads[2])?),
    })
}

fn choose_block(global: &[usize], limits: &Limits) -> Result<Vec<usize>> {
    // First the least block per dimension that keeps the grid within the limit...
    let mut block = Vec::with_capacity(global.len());
    for (d, &g) in global.iter().enumerate() {
        let need = g.div_ceil(limits.max_grid[d].max(1));
        let b = smallest_divisor(g, need, limits.max_block[d]).ok_or_else(|| {
            Error::invalid(format!(
                "global size {g} in dimension {d} has no divisor between {need} and {} (the \
                 device's grid and block limits): give a size with a suitable divisor or a local size",
                limits.max_block[d]
            ))
        })?;
        block.push(b);
    }
    let product = |b: &[usize]| b.iter().try_fold(1usize, |a, &x| a.checked_mul(x));
    let least = product(&block).filter(|&t| t <= limits.max_threads).ok_or_else(|| {
        Error::invalid(format!(
            "global size {global:?} needs blocks of at least {block:?} threads, the kernel takes at most {}",
            limits.max_threads
        ))
    })?;
    // ...then grown towards the target, dimension 0 first (consecutive x are coalesced).
    let target = TARGET_BLOCK.min(limits.max_threads).max(least);
    for d in 0..block.len() {
        // Every block dimension is at least 1, and the product stays within the target.
        let others = product(&block).unwrap_or(least) / block[d].max(1);
        let cap = (target / others.max(1)).min(limits.max_block[d]);
        block[d] = largest_divisor(global[d], cap).max(block[d]);
    }
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: Limits = Limits {
        max_threads: 1024,
        max_block: [1024, 1024, 64],
        max_grid: [i32::MAX as usize, 65535, 65535],
    };

    fn g(global: &[usize], local: Option<&[usize]>, lim: &Limits) -> Result<Geometry> {
        let mut l = Launch::new(global)?;
        if let Some(local) = local {
            l = l.with_local(local)?;
        }
        geometry(&l, lim)
    }

    #[test]
    fn a_local_size_is_the_block() {
        let r = g(&[1024, 6], Some(&[128, 2]), &H100).unwrap();
        assert_eq!(r, Geometry { grid: (8, 3, 1), block: (128, 2, 1) });
        assert!(g(&[4096], Some(&[2048]), &H100).is_err(), "more threads than the kernel takes");
        let small = Limits { max_threads: 128, ..H100 };
        assert!(g(&[1024], Some(&[256]), &small).is_err());
        assert!(g(&[64, 64, 128], Some(&[1, 1, 128]), &H100).is_err(), "z block over 64");
        assert!(g(&[2, 65536 * 2], Some(&[2, 1]), &H100).is_err(), "y grid over 65535");
    }

    #[test]
    fn without_a_local_size_blocks_divide_the_global_size() {
        assert_eq!(g(&[1 << 20], None, &H100).unwrap(), Geometry { grid: (4096, 1, 1), block: (256, 1, 1) });
        assert_eq!(g(&[1000], None, &H100).unwrap(), Geometry { grid: (4, 1, 1), block: (250, 1, 1) });
        assert_eq!(g(&[7], None, &H100).unwrap(), Geometry { grid: (1, 1, 1), block: (7, 1, 1) });
        // A prime runs with blocks of one thread: exactly the work-items asked for.
        assert_eq!(g(&[1_000_003], None, &H100).unwrap().block, (1, 1, 1));
        let two = g(&[64, 100], None, &H100).unwrap();
        assert_eq!(two, Geometry { grid: (1, 25, 1), block: (64, 4, 1) });
        // A y extent past the grid limit takes a larger block in y.
        let tall = g(&[1, 65536 * 4], None, &H100).unwrap();
        assert_eq!(tall.block.1 as usize * tall.grid.1 as usize, 65536 * 4);
        assert!(tall.grid.1 <= 65535);
        // A prime past the y grid limit has no block: a typed error.
        assert!(g(&[1, 1_000_003], None, &H100).is_err());
        for (global, lim) in
            [(&[1usize << 20, 3, 5][..], H100), (&[96, 96], Limits { max_threads: 64, ..H100 })]
        {
            let r = g(global, None, &lim).unwrap();
            let b = [r.block.0, r.block.1, r.block.2];
            assert!(b.iter().map(|&x| x as usize).product::<usize>() <= lim.max_threads, "{r:?}");
            for (d, &n) in global.iter().enumerate() {
                assert_eq!(n % b[d] as usize, 0, "{r:?}");
            }
        }
    }

    #[test]
    fn sizes_past_u32_are_errors() {
        let lim = Limits { max_grid: [usize::MAX; 3], ..H100 };
        assert!(g(&[1 << 41], Some(&[256]), &lim).is_err());
        assert!(g(&[1 << 41], Some(&[256]), &H100).is_err());
    }
}
