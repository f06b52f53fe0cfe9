//! ndarray interop: zero-copy views of CPU allocations.

use gpubuf_core::{Allocator, Backend, Layout, Order};
use gpubuf_cpu::{with_array, with_array_mut, CpuBackend};
use ndarray::{s, Array2};

fn setup() -> (CpuBackend, gpubuf_cpu::CpuMemory) {
    let cpu = CpuBackend::new();
    let mem = cpu.allocate(12 * 4).unwrap();
    let vals: Vec<u8> = (0..12i32).flat_map(|v| v.to_le_bytes()).collect();
    cpu.write(cpu.default_stream(), &mem, 0, &vals).unwrap();
    (cpu, mem)
}

#[test]
fn views_match_the_layout() {
    let (_cpu, mem) = setup();
    let c = Layout::contiguous(&[3, 4], Order::C).unwrap();
    let want = Array2::from_shape_vec((3, 4), (0..12).collect()).unwrap();
    with_array::<i32, _>(&mem, &c, |v| assert_eq!(v, want.view().into_dyn())).unwrap();
    let t = c.transposed();
    with_array::<i32, _>(&mem, &t, |v| assert_eq!(v, want.t().into_dyn())).unwrap();
    let f = c.sliced(&[0..3, 1..4]).unwrap().flipped(0).unwrap();
    with_array::<i32, _>(&mem, &f, |v| assert_eq!(v, want.slice(s![..;-1, 1..]).into_dyn())).unwrap();
}

#[test]
fn mutable_views_write_through_and_refuse_aliasing() {
    let (cpu, mem) = setup();
    let c = Layout::contiguous(&[3, 4], Order::C).unwrap();
    with_array_mut::<i32, _>(&mem, &c.flipped(1).unwrap(), |mut v| v[[0, 0]] = 99).unwrap();
    let mut back = [0u8; 16];
    cpu.read(cpu.default_stream(), &mem, 0, &mut back).unwrap();
    assert_eq!(&back[12..16], &99i32.to_le_bytes());
    let bcast = Layout::new(vec![3, 4], vec![0, 1], 0).unwrap();
    assert!(with_array_mut::<i32, _>(&mem, &bcast, |_| ()).is_err());
    assert!(with_array::<i32, _>(&mem, &bcast, |v| v.sum()).is_ok(), "read-only broadcasts are fine");
    let outside = Layout::new(vec![4, 4], vec![4, 1], 0).unwrap();
    assert!(with_array::<i32, _>(&mem, &outside, |_| ()).is_err());
}

#[test]
fn empty_views_at_any_offset_form_no_pointer() {
    let (_cpu, mem) = setup();
    // Empty views address nothing, whatever their offset and strides: no pointer into (or
    // past) the allocation is formed for them.
    for layout in [
        Layout::new(vec![0], vec![1], usize::MAX).unwrap(),
        Layout::new(vec![0], vec![1], 1 << 40).unwrap(),
        Layout::new(vec![3, 0], vec![isize::MIN, isize::MAX], usize::MAX / 2).unwrap(),
        Layout::new(vec![0, 5], vec![1, -(1 << 40)], 12).unwrap(),
    ] {
        let n = with_array::<i32, _>(&mem, &layout, |v| (v.len(), v.shape().to_vec())).unwrap();
        assert_eq!(n, (0, layout.shape().to_vec()));
        let n = with_array_mut::<i32, _>(&mem, &layout, |v| v.len()).unwrap();
        assert_eq!(n, 0);
    }
    // The allocation is still usable afterwards.
    let c = Layout::contiguous(&[12], Order::C).unwrap();
    assert_eq!(with_array::<i32, _>(&mem, &c, |v| v.sum()).unwrap(), 66);
}

#[test]
fn length_one_axes_take_any_stride() {
    let (_cpu, mem) = setup();
    for s in [isize::MIN, isize::MAX, 1 << 62, -(1 << 62)] {
        let l = Layout::new(vec![1, 3, 1], vec![s, 2, s], 1).unwrap();
        let got = with_array::<i32, _>(&mem, &l, |v| v.iter().copied().collect::<Vec<_>>()).unwrap();
        assert_eq!(got, vec![1, 3, 5], "stride {s}");
        with_array_mut::<i32, _>(&mem, &l, |mut v| v[[0, 1, 0]] = -3).unwrap();
        assert_eq!(with_array::<i32, _>(&mem, &l, |v| v[[0, 1, 0]]).unwrap(), -3);
        with_array_mut::<i32, _>(&mem, &l, |mut v| v[[0, 1, 0]] = 3).unwrap();
    }
}
