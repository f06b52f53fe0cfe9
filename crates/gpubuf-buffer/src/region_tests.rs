//! Region writes on the CPU backend; `gpubuf-testkit/tests/region_write.rs` runs them on
//! every backend.

use super::*;
use gpubuf_core::Layout;
use gpubuf_cpu::CpuBackend;
use ndarray::{Array2, Array3, ArrayD};

fn iota(n: usize) -> Vec<i32> {
    (1..=n).map(|v| i32::try_from(v).unwrap()).collect()
}

/// `a[rows, cols] = host` done element by element on the host.
fn expected(base: &[i32], layout: &Layout, host: &ArrayD<i32>) -> Vec<i32> {
    let mut out = base.to_vec();
    for (index, &v) in host.indexed_iter() {
        out[layout.index_of(index.slice()).unwrap()] = v;
    }
    out
}

#[test]
fn long_rows_are_gathered_and_the_plan_is_reused() {
    let cpu = CpuBackend::new();
    let plans = RegionPlans::new();
    let a = NDBuffer::<_, i32>::zeros(&cpu, &[6, 200]).unwrap();
    // Rows 1..4, columns 10..110: rows of 100 elements, a row gather.
    let region = a.slice(&[1..4, 10..110]).unwrap();
    let host = Array2::from_shape_vec((3, 100), iota(300)).unwrap().into_dyn();
    region.write_region(host.view(), &plans).unwrap();
    let want = expected(&vec![0; 1200], region.layout(), &host);
    assert_eq!(a.to_vec().unwrap(), want);
    assert_eq!(plans.len(), 1);
    // Another region of the same shape and strides elsewhere: the cached plan, relative to
    // the region's span, lands at the new place.
    let other = a.slice(&[3..6, 90..190]).unwrap();
    let host2 = host.mapv(|v| -v);
    other.write_region(host2.view(), &plans).unwrap();
    assert_eq!(plans.len(), 1, "one shape and strides, one plan");
    assert_eq!(a.to_vec().unwrap(), expected(&want, other.layout(), &host2));
}

#[test]
fn regions_of_other_strides_get_their_own_plan() {
    let cpu = CpuBackend::new();
    let plans = RegionPlans::new();
    let a = NDBuffer::<_, i32>::zeros(&cpu, &[4, 300]).unwrap();
    let narrow = NDBuffer::<_, i32>::zeros(&cpu, &[4, 100]).unwrap();
    let host = Array2::from_shape_vec((2, 64), iota(128)).unwrap().into_dyn();
    let r1 = narrow.slice(&[1..3, 0..64]).unwrap();
    r1.write_region(host.view(), &plans).unwrap();
    // Same shape and first element, rows 300 apart instead of 100.
    let r2 = a.slice(&[1..3, 0..64]).unwrap();
    r2.write_region(host.view(), &plans).unwrap();
    assert_eq!(plans.len(), 2);
    assert_eq!(a.to_vec().unwrap(), expected(&vec![0; 1200], r2.layout(), &host));
    assert_eq!(narrow.to_vec().unwrap(), expected(&vec![0; 400], r1.layout(), &host));
}

#[test]
fn short_rows_and_flips_are_scattered() {
    let cpu = CpuBackend::new();
    let plans = RegionPlans::with_capacity(1);
    let a = NDBuffer::<_, i32>::zeros(&cpu, &[3, 4, 5]).unwrap();
    let region = a.slice(&[0..3, 1..3, 0..5]).unwrap().flip(2).unwrap().transpose(Some(&[1, 0, 2])).unwrap();
    let host = Array3::from_shape_vec((2, 3, 5), iota(30)).unwrap().into_dyn();
    region.write_region(host.view(), &plans).unwrap();
    assert_eq!(a.to_vec().unwrap(), expected(&vec![0; 60], region.layout(), &host));
    // A strided host array (a transposed ndarray view) gives the same elements.
    let b = NDBuffer::<_, i32>::zeros(&cpu, &[3, 4, 5]).unwrap();
    let host_t = host.t().to_owned();
    let same = b.slice(&[0..3, 1..3, 0..5]).unwrap().flip(2).unwrap().transpose(Some(&[1, 0, 2])).unwrap();
    same.write_region(host_t.t(), &plans).unwrap();
    assert_eq!(b.to_vec().unwrap(), a.to_vec().unwrap());
    // Capacity 1: another layout replaces the plan.
    a.slice(&[0..2, 0..2, 0..2])
        .unwrap()
        .write_region(host.slice(ndarray::s![..2, ..2, ..2]), &plans)
        .unwrap();
    assert_eq!(plans.len(), 1);
}

#[test]
fn contiguous_regions_need_no_staging_and_no_plan() {
    let cpu = CpuBackend::new();
    let plans = RegionPlans::new();
    let a = NDBuffer::<_, i32>::zeros(&cpu, &[4, 8]).unwrap();
    let host = Array2::from_shape_vec((2, 8), iota(16)).unwrap();
    a.slice(&[1..3, 0..8])
        .unwrap()
        .write_region_with(host.view(), &plans, |_| panic!("no staging for a contiguous region"))
        .unwrap();
    assert!(plans.is_empty());
    let mut want = vec![0; 32];
    want[8..24].copy_from_slice(&iota(16));
    assert_eq!(a.to_vec().unwrap(), want);
}

#[test]
fn bad_input_is_an_error() {
    let cpu = CpuBackend::new();
    let plans = RegionPlans::with_capacity(0);
    let a = NDBuffer::<_, f32>::zeros(&cpu, &[4, 4]).unwrap();
    let col = a.slice(&[0..4, 1..2]).unwrap();
    let four = ndarray::Array1::<f32>::ones(4);
    assert!(matches!(col.write_region(four.view(), &plans), Err(Error::ShapeMismatch { .. })));
    let host = ndarray::Array2::<f32>::ones((4, 1));
    let wrong = |_: &[usize]| NDBuffer::empty(&cpu, &[1, 4], Order::C);
    assert!(matches!(col.write_region_with(host.view(), &plans, wrong), Err(Error::InvalidArgument(_))));
    let f_order = |s: &[usize]| NDBuffer::<_, f32>::empty(&cpu, &[s[1], s[0]], Order::C)?.transpose(None);
    let square = a.slice(&[0..2, 0..2]).unwrap();
    let host2 = ndarray::Array2::<f32>::ones((2, 2));
    assert!(matches!(
        square.write_region_with(host2.view(), &plans, f_order),
        Err(Error::InvalidArgument(_))
    ));
    // A broadcast view (stride 0) would write one element twice.
    let layout = Layout::new(vec![3, 2], vec![0, 1], 0).unwrap();
    let bcast = NDBuffer::<_, f32>::from_buffer_layout(a.buffer().clone(), layout).unwrap();
    let host3 = ndarray::Array2::<f32>::ones((3, 2));
    assert!(matches!(bcast.write_region(host3.view(), &plans), Err(Error::InvalidPlan(_))));
    assert_eq!(a.to_vec().unwrap(), vec![0.0; 16], "nothing written by a refused call");
    assert!(plans.is_empty(), "capacity 0 keeps nothing");
    // An empty region is a no-op.
    a.slice(&[0..0, 0..4])
        .unwrap()
        .write_region(ndarray::Array2::<f32>::zeros((0, 4)).view(), &plans)
        .unwrap();
}
