//! The two index paths of the block plan kernel (`kernels/shared/plan_blocks.h`, the text
//! the CUDA build compiles too) against a host reference, run as an OpenCL kernel (PoCL
//! here): `general_index` (64-bit) for every block header, and `narrow_index` (32-bit)
//! wherever `fits_narrow` lets a block take it. Extents and strides go far past what a plan
//! test can allocate (up to 2^40), so a bound of `fits_narrow` that lets a block whose
//! offsets overflow 32 bits take the narrow path fails here, as does a wrong carry in either
//! path.
#![cfg(feature = "opencl")]

use gpubuf::kernel::Launch;
use gpubuf::opencl::{prelude, PLAN_BLOCKS_SOURCE};
use gpubuf::{Args, Device, KernelSource, NDBuffer, Result};
use proptest::prelude::*;
use std::sync::OnceLock;

/// Elements a block moves on OpenCL (`ELEMS` of kernels/opencl/prelude.cl).
const ELEMS: usize = gpubuf::opencl::shape::BLOCK_ELEMS;

/// A block header's starting index (i1, i2, i3), extents (e1, e2, e3) and strides (s0..s3).
#[derive(Debug, Clone, Copy)]
struct Header {
    i: [i64; 3],
    e: [i64; 3],
    s: [i64; 4],
}

const PROBE: &str = r#"
__kernel void index_probe(__global const long* hd, long ho, __global long* out, long oo) {
    __local Header h;
    hd += ho;
    out += oo;
    h.base = 0;
    h.i1 = hd[0]; h.i2 = hd[1]; h.i3 = hd[2];
    h.e1 = hd[3]; h.e2 = hd[4]; h.e3 = hd[5];
    h.s0 = hd[6]; h.s1 = hd[7]; h.s2 = hd[8]; h.s3 = hd[9];
    h.m3 = magic(h.e3); h.m2 = magic(h.e2); h.m1 = magic(h.e1);
    h.narrow = fits_narrow(h.e1, h.e2, h.e3, h.s0, h.s1, h.s2, h.s3);
    for (int l = 0; l < ELEMS; l++) {
        out[2 * l] = general_index(&h, l);
        out[2 * l + 1] = h.narrow ? (long)narrow_index(&h, l) : 0;
    }
    out[2 * ELEMS] = h.narrow;
}
"#;

fn source() -> &'static str {
    static S: OnceLock<String> = OnceLock::new();
    S.get_or_init(|| format!("{}{}{}", prelude(1, 1), PLAN_BLOCKS_SOURCE, PROBE))
}

fn device() -> Option<Device> {
    gpubuf_testkit::opencl().map(Device::from)
}

/// Per element: (general_index, narrow_index or 0), and whether the block took the narrow
/// path.
fn run(d: &Device, h: &Header) -> Result<(Vec<(i64, i64)>, bool)> {
    let words = [h.i[0], h.i[1], h.i[2], h.e[0], h.e[1], h.e[2], h.s[0], h.s[1], h.s[2], h.s[3]];
    let hd = NDBuffer::<Device, i64>::from_slice(d, &[words.len()], &words)?;
    let out = NDBuffer::<Device, i64>::zeros(d, &[2 * ELEMS + 1])?;
    let k = d.kernel(&KernelSource::new().opencl(source()), "index_probe")?;
    k.launch(&Launch::new(&[1])?, &Args::new().array(&hd).array_mut(&out))?;
    let v = out.to_vec()?;
    Ok((v[..2 * ELEMS].chunks(2).map(|p| (p[0], p[1])).collect(), v[2 * ELEMS] == 1))
}

/// Element l's offset from the block's first element, carried over the extents (dim 0
/// unbounded), and the size of its largest term, in exact arithmetic.
fn reference(h: &Header, l: usize) -> (i128, i128) {
    let [i1, i2, i3] = h.i.map(i128::from);
    let [e1, e2, e3] = h.e.map(i128::from);
    let [s0, s1, s2, s3] = h.s.map(i128::from);
    let c3 = i3 + l as i128;
    let c2 = i2 + c3 / e3;
    let c1 = i1 + c2 / e2;
    let terms = [(c3 % e3 - i3) * s3, (c2 % e2 - i2) * s2, (c1 % e1 - i1) * s1, (c1 / e1) * s0];
    (terms.iter().sum(), terms.iter().map(|t| t.abs()).max().unwrap_or(0))
}

/// Checks one header: the 64-bit path wherever its terms fit 64 bits (as every real
/// array's offsets do), the 32-bit one wherever the kernel chose it. Returns whether it did.
fn check(d: &Device, h: &Header) -> bool {
    let (got, narrow) = run(d, h).unwrap();
    for (l, &(general, narrowed)) in got.iter().enumerate() {
        let (want, largest) = reference(h, l);
        if largest < 1 << 60 {
            assert_eq!(i128::from(general), want, "general_index, element {l} of {h:?}");
        }
        if narrow {
            assert_eq!(i128::from(narrowed), want, "narrow_index, element {l} of {h:?}");
        }
    }
    narrow
}

/// A size spread over many orders of magnitude: 2^k plus a part below it, k up to `bits`.
fn magnitude(bits: u32) -> impl Strategy<Value = i64> {
    (0..=bits, any::<u64>()).prop_map(|(k, r)| (1i64 << k) + (r % (1u64 << k)) as i64 - 1)
}

fn extent() -> impl Strategy<Value = i64> {
    prop_oneof![1i64..8, 1i64..(2 * ELEMS as i64), magnitude(40).prop_map(|e| e.max(1))]
}

fn stride() -> impl Strategy<Value = i64> {
    (magnitude(40), any::<bool>()).prop_map(|(s, neg)| if neg { -s } else { s })
}

fn header() -> impl Strategy<Value = Header> {
    ([extent(), extent(), extent()], [stride(), stride(), stride(), stride()], any::<[u64; 3]>())
        .prop_map(|(e, s, r)| Header { i: [0, 1, 2].map(|k| (r[k] % e[k] as u64) as i64), e, s })
}

/// Headers whose reach lies around 2^31: extents up to 10^5, strides up to 2^31.
fn near_header() -> impl Strategy<Value = Header> {
    let extent = || prop_oneof![1i64..16, 1i64..(2 * ELEMS as i64), 1i64..100_000];
    let stride = || (magnitude(31), any::<bool>()).prop_map(|(s, neg)| if neg { -s } else { s });
    ([extent(), extent(), extent()], [stride(), stride(), stride(), stride()], any::<[u64; 3]>())
        .prop_map(|(e, s, r)| Header { i: [0, 1, 2].map(|k| (r[k] % e[k] as u64) as i64), e, s })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random headers, most of them past 32 bits somewhere.
    #[test]
    fn both_index_paths_match_the_reference(h in header()) {
        if let Some(d) = device() {
            check(&d, &h);
        }
    }

    /// Headers on both sides of the 32-bit bound, where a bound that lets too much through
    /// shows as a wrong narrow offset.
    #[test]
    fn near_the_bound_both_paths_match_the_reference(h in near_header()) {
        if let Some(d) = device() {
            check(&d, &h);
        }
    }
}

/// Headers on either side of the 32-bit bound take the path they should, and both give the
/// reference's offsets; a halo-sized block takes the narrow path.
#[test]
fn the_narrow_bound_is_where_offsets_leave_32_bits() {
    let Some(d) = device() else { return };
    // A c48 halo edge: rows of 240 doubles, 3 of them a level, levels 4320 apart.
    let halo = Header { i: [0, 1, 200], e: [80, 3, 240], s: [4 * 80 * 54 * 54, 54 * 80, 54, 1] };
    assert!(check(&d, &halo), "a halo block takes the narrow path");
    // One carry into dim 0 of stride s0: the reach is s0 plus the other terms' extents.
    let edge = |s0: i64| Header { i: [0, 0, 1000], e: [1, 1, 1024], s: [s0, 7, 5, 1] };
    let room = (1i64 << 31) - 1023; // (e3 - 1) * s3 = 1023; e1, e2 of 1 never move
    assert!(check(&d, &edge(room - 1)), "reach 2^31 - 1 is narrow");
    assert!(!check(&d, &edge(room)), "reach 2^31 is not");
    assert!(!check(&d, &edge(-room)), "nor is its negation");
    // A stride or extent too large for 32 bits on its own.
    let wide = [
        Header { i: [0, 0, 0], e: [3, 3, 1 << 30], s: [1, 1, 1, 1] },
        Header { i: [0, 0, 0], e: [3, 3, 300], s: [1 << 31, 1, 1, 1] },
        Header { i: [2, 0, 0], e: [3, 1, 1], s: [-(1 << 31), 1 << 20, 1, 1] },
    ];
    for h in &wide {
        assert!(!check(&d, h), "{h:?} is not narrow");
    }
}
