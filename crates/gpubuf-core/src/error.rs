//! The error type shared by every gpubuf crate.
//!
//! Each variant says what the caller can do about it; [`Error::is_retryable`] answers the
//! common question "does trying again (after freeing memory or waiting) make sense?".

use crate::BackendKind;

/// Result alias used across gpubuf.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in gpubuf, from bad user input to driver failures.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device could not provide `requested` bytes. Retrying after freeing memory may succeed.
    #[error("out of memory: requested {requested} bytes{}{}", fmt_available(*available), fmt_pool(pool))]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
        /// Bytes the device (or pool limit) still had, when known.
        available: Option<usize>,
        /// The pool's counters when a memory pool gave up (after freeing what it held).
        pool: Option<Box<PoolStats>>,
    },
    /// An array's shape is not the one the operation needs.
    #[error("shape mismatch: expected {expected:?}, got {got:?}")]
    ShapeMismatch {
        /// The shape the operation needs.
        expected: Vec<usize>,
        /// The shape it was given.
        got: Vec<usize>,
    },
    /// A length is not the one the operation needs: a byte buffer or a list of the wrong
    /// size. Unlike [`Error::ShapeMismatch`] it names its unit and, for the bytes of typed
    /// elements, the element count expected. Not retryable: pass data of the right length.
    ///
    /// ```
    /// use gpubuf_core::{DType, Error};
    /// let e = Error::byte_length("halo data", 23040, 8, Some(DType::F64));
    /// assert_eq!(e.to_string(), "halo data: expected 23040 bytes (2880 float64 elements), got 8 bytes");
    /// assert!(!e.is_retryable());
    /// ```
    #[error("{what}: expected {expected} {unit}{}, got {got} {unit}", fmt_elements(*elements))]
    LengthMismatch {
        /// What was measured (the argument or buffer).
        what: String,
        /// The unit of both lengths, e.g. `"bytes"`.
        unit: &'static str,
        /// The length the operation needs.
        expected: usize,
        /// The length it was given.
        got: usize,
        /// For a length in bytes of typed elements: their dtype and how many the operation
        /// needs.
        elements: Option<(crate::DType, usize)>,
    },
    /// An array's element type is not the one the operation needs.
    #[error("dtype mismatch: expected {expected}, got {got}")]
    DTypeMismatch {
        /// The dtype the operation needs.
        expected: crate::DType,
        /// The dtype it was given.
        got: crate::DType,
    },
    /// A fixed-capacity container cannot take `adding` more elements.
    #[error("capacity exceeded: capacity {capacity}, holding {len}, adding {adding}")]
    Capacity {
        /// Total capacity in elements.
        capacity: usize,
        /// Elements already held.
        len: usize,
        /// Elements the operation tried to add.
        adding: usize,
    },
    /// An index or byte range lies outside the object it addresses.
    #[error("out of bounds: {what} ({} of length {len})", fmt_range(*start, *end))]
    OutOfBounds {
        /// What was addressed.
        what: String,
        /// First index of the requested range.
        start: usize,
        /// One past the last index of the requested range.
        end: usize,
        /// Length of the addressed object.
        len: usize,
    },
    /// A copy plan is malformed (bad source, out-of-bounds box, overlapping writes).
    #[error("invalid copy plan: {0}")]
    InvalidPlan(String),
    /// An argument is invalid for a reason not covered by a more specific variant.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The backend is not compiled in, or cannot run on this machine (no runtime, no device).
    #[error("backend {backend} unavailable: {reason}")]
    BackendUnavailable {
        /// The backend that was asked for.
        backend: BackendKind,
        /// Why it cannot be used.
        reason: String,
    },
    /// Two objects that must live on the same device do not.
    #[error("device mismatch: {0}")]
    DeviceMismatch(String),
    /// A kernel failed to compile; `log` carries the compiler's build log.
    #[error("{backend} kernel build failed: {log}")]
    Build {
        /// The backend whose compiler failed.
        backend: BackendKind,
        /// The build log.
        log: String,
    },
    /// The driver or runtime returned an error code.
    #[error("{backend} driver error {code}: {message}")]
    Driver {
        /// The backend that reported it.
        backend: BackendKind,
        /// The driver's numeric error code.
        code: i64,
        /// What the driver call was and what it said.
        message: String,
    },
}

fn fmt_pool(pool: &Option<Box<PoolStats>>) -> String {
    match pool {
        Some(p) => format!(
            "; pool: {} active bytes in {} blocks, {} held bytes in {} blocks, {} managed, limit {}",
            p.active_bytes,
            p.active_blocks,
            p.held_bytes,
            p.held_blocks,
            p.managed_bytes,
            p.limit.map_or("none".to_string(), |l| l.to_string())
        ),
        None => String::new(),
    }
}

/// A memory pool's counters at one moment (filled in by `gpubuf-pool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Blocks handed out and not yet returned.
    pub active_blocks: usize,
    /// Bytes of those blocks (block sizes, after rounding).
    pub active_bytes: usize,
    /// Free blocks the pool keeps for reuse.
    pub held_blocks: usize,
    /// Bytes of those blocks.
    pub held_bytes: usize,
    /// Bytes the pool holds from its allocator (active + held).
    pub managed_bytes: usize,
    /// Highest `managed_bytes` seen.
    pub peak_managed_bytes: usize,
    /// Highest `active_bytes` seen.
    pub peak_active_bytes: usize,
    /// Allocations served without calling the allocator.
    pub hits: u64,
    /// Allocations that called the allocator.
    pub misses: u64,
    /// The memory limit, if one is set.
    pub limit: Option<usize>,
}

/// `n` bytes in binary units (`512 B`, `1.5 KiB`, `3.0 MiB`, ...).
fn fmt_bytes(n: usize) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    // A display value only: the f64 rounding of huge counts does not matter here.
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

impl std::fmt::Display for PoolStats {
    /// One line: `2 active blocks (3.0 MiB), 1 held (1.0 MiB); managed 4.0 MiB (peak 4.0
    /// MiB, active peak 3.0 MiB); 7 hits, 3 misses (70.0% hits); limit 1.0 GiB`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let blocks = |n: usize| if n == 1 { "block" } else { "blocks" };
        write!(
            f,
            "{} active {} ({}), {} held ({}); managed {} (peak {}, active peak {}); {} hits, {} misses",
            self.active_blocks,
            blocks(self.active_blocks),
            fmt_bytes(self.active_bytes),
            self.held_blocks,
            fmt_bytes(self.held_bytes),
            fmt_bytes(self.managed_bytes),
            fmt_bytes(self.peak_managed_bytes),
            fmt_bytes(self.peak_active_bytes),
            self.hits,
            self.misses,
        )?;
        let calls = u128::from(self.hits) + u128::from(self.misses);
        if calls > 0 {
            // Display only: f64 is precise enough for a percentage.
            write!(f, " ({:.1}% hits)", u128::from(self.hits) as f64 * 100.0 / calls as f64)?;
        }
        match self.limit {
            Some(l) => write!(f, "; limit {}", fmt_bytes(l)),
            None => write!(f, "; no limit"),
        }
    }
}

/// A requested range for a message. An end of `usize::MAX` is where a start plus a length
/// that overflowed was clamped: the message says the range reaches at least that far, not
/// that it is empty.
fn fmt_range(start: usize, end: usize) -> String {
    if end == usize::MAX {
        format!("range {start}..usize::MAX or past it (its end overflows usize)")
    } else {
        format!("range {start}..{end}")
    }
}

fn fmt_elements(elements: Option<(crate::DType, usize)>) -> String {
    match elements {
        Some((dtype, 1)) => format!(" (1 {dtype} element)"),
        Some((dtype, n)) => format!(" ({n} {dtype} elements)"),
        None => String::new(),
    }
}

fn fmt_available(available: Option<usize>) -> String {
    match available {
        Some(a) => format!(" ({a} available)"),
        None => String::new(),
    }
}

impl Error {
    /// Whether the same call may succeed later without changing its arguments:
    /// true for [`Error::OutOfMemory`] (free memory first) and transient driver errors.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::OutOfMemory { .. })
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    /// [`Error::LengthMismatch`] in bytes: `expected` and `got` are byte lengths; with a
    /// `dtype`, the message also gives how many elements of it `expected` holds (rounded
    /// down when it is not a whole number of them).
    pub fn byte_length(
        what: impl Into<String>,
        expected: usize,
        got: usize,
        dtype: Option<crate::DType>,
    ) -> Self {
        Error::LengthMismatch {
            what: what.into(),
            unit: "bytes",
            expected,
            got,
            elements: dtype.and_then(|d| expected.checked_div(d.size()).map(|n| (d, n))),
        }
    }

    /// Shorthand for [`Error::InvalidPlan`].
    pub fn plan(msg: impl Into<String>) -> Self {
        Error::InvalidPlan(msg.into())
    }
}

/// ndarray's shape errors (`Array::from_shape_vec`, `into_shape_with_order`, ...) become
/// [`Error::InvalidArgument`] carrying ndarray's message, so `?` works on them in code
/// that returns gpubuf's [`Result`].
///
/// ```
/// fn square(v: Vec<f64>) -> gpubuf_core::Result<ndarray::Array2<f64>> {
///     Ok(ndarray::Array2::from_shape_vec((2, 2), v)?)
/// }
/// assert!(square(vec![1.0; 4]).is_ok());
/// assert!(matches!(square(vec![1.0; 3]), Err(gpubuf_core::Error::InvalidArgument(_))));
/// ```
impl From<ndarray::ShapeError> for Error {
    fn from(e: ndarray::ShapeError) -> Self {
        Error::InvalidArgument(format!("ndarray shape error: {e}"))
    }
}

#[cfg(test)]
mod stats_tests {
    use super::*;

    #[test]
    fn pool_stats_read_as_one_line() {
        let s = PoolStats {
            active_blocks: 2,
            active_bytes: 3 << 20,
            held_blocks: 1,
            held_bytes: 1 << 20,
            managed_bytes: 4 << 20,
            peak_managed_bytes: 4 << 20,
            peak_active_bytes: 3 << 20,
            hits: 7,
            misses: 3,
            limit: Some(1 << 30),
        };
        assert_eq!(
            s.to_string(),
            "2 active blocks (3.0 MiB), 1 held (1.0 MiB); managed 4.0 MiB (peak 4.0 MiB, active peak \
             3.0 MiB); 7 hits, 3 misses (70.0% hits); limit 1.0 GiB"
        );
        let empty = PoolStats { active_blocks: 1, active_bytes: 512, ..PoolStats::default() }.to_string();
        assert_eq!(
            empty,
            "1 active block (512 B), 0 held (0 B); managed 0 B (peak 0 B, active peak 0 B); 0 hits, 0 \
             misses; no limit"
        );
        let huge =
            PoolStats { held_bytes: usize::MAX, hits: u64::MAX, misses: u64::MAX, ..PoolStats::default() };
        assert!(huge.to_string().contains("16.0 EiB") && huge.to_string().contains("(50.0% hits)"));
    }

    #[test]
    fn an_overflowing_range_is_not_shown_empty() {
        let e = |start, end| {
            Error::OutOfBounds { what: "buffer range (bytes)".into(), start, end, len: 16 }.to_string()
        };
        assert_eq!(e(4, 20), "out of bounds: buffer range (bytes) (range 4..20 of length 16)");
        let huge = e(usize::MAX, usize::MAX);
        assert!(huge.contains("usize::MAX or past it"), "{huge}");
        assert!(!huge.contains(&format!("{0}..{0}", usize::MAX)), "{huge}");
    }
}
