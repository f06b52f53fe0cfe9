//! Moving the rows of one work unit: a copy, a negating loop, a strided loop, or tiles of
//! rows for a transpose, plus two memory-system measures for large gathers, both measured on halo packs
//! (`cargo run --release -p gpubuf-halo --example pack`, docs/halo.md):
//!
//! * **Streaming stores.** A gather of at least [`STREAM_FROM`] bytes writes its buffer
//!   once and does not read it back, so rows read from long array runs are written with
//!   non-temporal stores: no read-for-ownership of buffer lines, no eviction of the arrays
//!   from the cache. (glibc's `memcpy` switches to them only above 192 MiB here.)
//! * **Prefetch.** When an array run (rows contiguous in the array) is split over several
//!   buffer rows and is short, as in a rotated north or south halo, the hardware prefetcher
//!   cannot learn the jump from one run to the next; the next run is prefetched while this
//!   one moves.

use crate::kernels::{Direction, Job, Ptr, Unit};

/// Gathers moving at least this many bytes write their buffer with streaming stores.
pub(crate) const STREAM_FROM: usize = 4 << 20;

/// Array runs at least this long (bytes) are streamed; shorter split runs are prefetched.
const LONG_RUN: usize = 4096;

/// How a plan moves its rows.
#[derive(Clone, Copy)]
pub(crate) struct How {
    pub(crate) dir: Direction,
    /// The dtype is a float (negation flips the sign bit).
    pub(crate) float: bool,
    /// Streaming stores are allowed (a large gather).
    pub(crate) stream: bool,
}

/// An element as an unsigned word of its width.
pub(crate) trait Word: Copy + Send + Sync {
    /// The sign bit.
    const SIGN: u64;
    /// The negation of the value: the sign bit flipped for floats, two's complement for
    /// integers.
    fn neg(self, float: bool) -> Self;
}

macro_rules! word {
    ($t:ty) => {
        impl Word for $t {
            const SIGN: u64 = 1 << (<$t>::BITS - 1);
            #[inline(always)]
            fn neg(self, float: bool) -> Self {
                if float {
                    self ^ (Self::SIGN as $t)
                } else {
                    self.wrapping_neg()
                }
            }
        }
    };
}
word!(u8);
word!(u16);
word!(u32);
word!(u64);

/// A position in a job: the row's indices on the two middle axes and its first element in
/// the array and in the buffer.
#[derive(Clone, Copy)]
struct Cursor {
    i1: usize,
    i2: usize,
    pa: isize,
    pb: isize,
}

impl Cursor {
    /// Row `r` of `j` (rows count the three outer axes in order), at column `c0`.
    fn at(j: &Job, r: usize, c0: usize) -> Self {
        let [_, e1, e2, _] = j.ext;
        let (i2, i1, i0) = (r % e2, (r / e2) % e1, r / (e1 * e2));
        let start = |s: &[isize; 4]| {
            i0 as isize * s[0] + i1 as isize * s[1] + i2 as isize * s[2] + c0 as isize * s[3]
        };
        Cursor { i1, i2, pa: j.array_off + start(&j.sa), pb: j.buffer_off + start(&j.sb) }
    }

    /// Steps to the next row (which must exist), carrying across the outer extents. Every
    /// intermediate position is a row start inside the box and its buffer range (back to
    /// the first row of the axis before moving on), so no sum leaves `isize`.
    #[inline(always)]
    fn step(&mut self, j: &Job) {
        let [_, e1, e2, _] = j.ext;
        self.i2 += 1;
        if self.i2 < e2 {
            self.pa += j.sa[2];
            self.pb += j.sb[2];
            return;
        }
        let back2 = (e2 - 1) as isize;
        self.i2 = 0;
        self.pa -= back2 * j.sa[2];
        self.pb -= back2 * j.sb[2];
        self.i1 += 1;
        if self.i1 < e1 {
            self.pa += j.sa[1];
            self.pb += j.sb[1];
            return;
        }
        let back1 = (e1 - 1) as isize;
        self.i1 = 0;
        self.pa -= back1 * j.sa[1];
        self.pb -= back1 * j.sb[1];
        self.pa += j.sa[0];
        self.pb += j.sb[0];
    }
}

/// Moves one unit of job `j`.
///
/// # Safety
/// As [`crate::kernels::execute`]; `T` has the dtype's size.
pub(crate) unsafe fn rows<T: Word>(j: &Job, unit: Unit, array: Ptr, buffer: Ptr, how: How) {
    let (_, r0, r1, c0, c1) = unit;
    let n = c1 - c0;
    let array = array.0 as *mut T;
    let buffer = buffer.0 as *mut T;
    let (sa3, sb3) = (j.sa[3], j.sb[3]);
    let row_bytes = n * size_of::<T>();
    let run_rows = j.run_rows();
    let long = row_bytes * run_rows >= LONG_RUN;
    let contiguous = sa3 == 1 && sb3 == 1;
    let stream = how.stream && long && contiguous && (!j.negate || how.float);
    // Prefetch the next array run when short runs are split over several rows.
    let total = j.rows();
    let ahead = if !long && run_rows > 1 { run_rows } else { 0 };
    if sa3 == 1 && sb3 != 1 && j.sb[2] == 1 && j.ext[2] > 1 {
        // SAFETY: forwarded from this function's contract.
        unsafe { tiles(j, unit, array, buffer, how) };
        return;
    }
    let mut at = Cursor::at(j, r0, c0);
    let mut next = if ahead > 0 { Cursor::at(j, (r0 + ahead).min(total - 1), c0) } else { at };
    for r in r0..r1 {
        if r > r0 {
            at.step(j);
            if ahead > 0 && r + ahead < total {
                next.step(j);
            }
        }
        if ahead > 0 && r + ahead < total {
            prefetch(array.wrapping_offset(next.pa) as *const u8, row_bytes);
        }
        let (pa, pb) = (at.pa, at.pb);
        // SAFETY: `pa` and `pb` are the row's first element in the array and the buffer
        // (inside both, see below); the pointers are only formed here.
        let (src, dst, ss, ds) = unsafe {
            match how.dir {
                Direction::Gather => (array.offset(pa) as *const T, buffer.offset(pb), sa3, sb3),
                Direction::Scatter => (buffer.offset(pb) as *const T, array.offset(pa), sb3, sa3),
            }
        };
        // SAFETY: the row's elements `pa + k*sa3` lie in the segment's box, which plan
        // validation proved inside the array, and `pb + k*sb3` in the segment's buffer
        // range; units cover disjoint elements of the box, so no two threads write the
        // same element. Streaming rows are contiguous on both sides.
        unsafe {
            if stream {
                stream_row(src, dst, n, j.negate);
                continue;
            }
            match (contiguous, j.negate) {
                (true, false) => std::ptr::copy_nonoverlapping(src, dst, n),
                // Contiguous and negated: slices, so the loop vectorises.
                (true, true) => {
                    let (from, to) =
                        (std::slice::from_raw_parts(src, n), std::slice::from_raw_parts_mut(dst, n));
                    if how.float {
                        to.iter_mut().zip(from).for_each(|(d, v)| *d = v.neg(true));
                    } else {
                        to.iter_mut().zip(from).for_each(|(d, v)| *d = v.neg(false));
                    }
                }
                (false, negate) => {
                    for k in 0..n as isize {
                        let v = *src.offset(k * ss);
                        *dst.offset(k * ds) = if negate { v.neg(how.float) } else { v };
                    }
                }
            }
        }
    }
    if stream {
        store_fence();
    }
}

/// Rows of a transpose: contiguous in the array, strided in the buffer, with consecutive
/// rows adjacent in the buffer. Up to [`TILE`] rows move together, column by column, so
/// every buffer access covers `TILE` adjacent elements (a whole cache line for f64) and the
/// array is read along `TILE` rows at once, instead of one element per strided access.
///
/// # Safety
/// As [`rows`], for a job with `sa[3] == 1` and `sb[2] == 1`.
unsafe fn tiles<T: Word>(j: &Job, unit: Unit, array: *mut T, buffer: *mut T, how: How) {
    let (_, r0, r1, c0, c1) = unit;
    let n = (c1 - c0) as isize;
    let (sa2, sb3) = (j.sa[2], j.sb[3]);
    let e2 = j.ext[2];
    let mut at = Cursor::at(j, r0, c0);
    let mut r = r0;
    while r < r1 {
        // Rows of one run along axis 2 (no carry inside a tile).
        let g = TILE.min(r1 - r).min(e2 - at.i2) as isize;
        for k in 0..n {
            for t in 0..g {
                let a = at.pa + t * sa2 + k;
                let b = at.pb + t + k * sb3;
                // SAFETY: element `k` of row `r + t` of the unit: `a` lies in the segment's
                // box in the array and `b` in its buffer range (plan validation); units are
                // disjoint, so no other thread writes these elements.
                unsafe {
                    let (src, dst) = match how.dir {
                        Direction::Gather => (array.offset(a) as *const T, buffer.offset(b)),
                        Direction::Scatter => (buffer.offset(b) as *const T, array.offset(a)),
                    };
                    let v = *src;
                    *dst = if j.negate { v.neg(how.float) } else { v };
                }
            }
        }
        for _ in 0..g {
            at.step(j);
        }
        r += g as usize;
    }
}

/// Rows moved together by [`tiles`].
const TILE: usize = 16;

/// Asks for the cache lines of `bytes` bytes from `p` (a hint: never faults).
#[inline(always)]
fn prefetch(p: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut k = 0;
        while k < bytes {
            // SAFETY: `_mm_prefetch` is a hint: it never faults and has no effect the
            // program can observe, whatever the address (formed with `wrapping_add`).
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    p.wrapping_add(k).cast::<i8>(),
                )
            };
            k += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}

/// Orders this thread's streaming stores before whatever it does next (rayon's join then
/// publishes them to the caller).
#[inline]
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Copies `n` contiguous elements with non-temporal stores (negating floats on the way:
/// the caller never streams negated integers). Head and tail elements outside the 16-byte
/// aligned middle are copied plainly.
///
/// # Safety
/// `src` is valid for `n` reads and `dst` for `n` writes, both aligned to `T`, and they do
/// not overlap.
#[inline]
unsafe fn stream_row<T: Word>(src: *const T, dst: *mut T, n: usize, negate: bool) {
    let plain = |k: usize| {
        // SAFETY: `k < n`, inside both rows (the caller's contract).
        unsafe {
            let v = *src.add(k);
            *dst.add(k) = if negate { v.neg(true) } else { v };
        }
    };
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_set_epi64x, _mm_stream_si128, _mm_xor_si128};
        let size = size_of::<T>();
        // Elements before the first 16-byte boundary of `dst` (whole elements: `dst` is
        // aligned to `T`, whose size divides 16).
        let head = (((dst as usize).wrapping_neg() & 15) / size).min(n);
        let per = 16 / size;
        let blocks = (n - head) / per;
        (0..head).for_each(plain);
        // The sign bit of every element in a 16-byte lane, or nothing.
        let word = if negate { T::SIGN } else { 0 };
        let lane = (0..8 / size).fold(0u64, |acc, k| acc | (word << (k * size * 8)));
        // SAFETY: SSE2 is part of x86_64. Block `b` covers elements `head + b*per ..
        // head + (b+1)*per`, inside both rows; the store address is 16-byte aligned by the
        // choice of `head`; loads are unaligned.
        unsafe {
            let mask = _mm_set_epi64x(lane as i64, lane as i64);
            for b in 0..blocks {
                let k = head + b * per;
                let v = _mm_loadu_si128(src.add(k).cast::<__m128i>());
                _mm_stream_si128(dst.add(k).cast::<__m128i>(), _mm_xor_si128(v, mask));
            }
        }
        (head + blocks * per..n).for_each(plain);
    }
    #[cfg(not(target_arch = "x86_64"))]
    (0..n).for_each(plain);
}
