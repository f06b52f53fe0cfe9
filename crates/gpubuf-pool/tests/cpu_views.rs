//! Arrays a pool carves from one CPU segment are borrowed by their own bytes: a read view
//! of one and a write view (or a backend write) of another nest, whichever constructor
//! made them, while the same bytes read and written at once stay an error.

use gpubuf_buffer::ndarray::{arr2, s, Array2, ArrayView2, Axis};
use gpubuf_buffer::NDBuffer;
use gpubuf_core::{Backend, Error, Order};
use gpubuf_cpu::{CpuBackend, CpuView};
use gpubuf_pool::MemoryPool;
use std::sync::Arc;

const SHAPE: [usize; 2] = [4, 6];

/// One array of `SHAPE` from every constructor that puts an array in pooled memory, with
/// its constructor's name and the values it must hold.
fn every_pooled(
    cpu: &CpuBackend,
    pool: &MemoryPool<CpuBackend>,
) -> Vec<(&'static str, NDBuffer<CpuBackend, f64>)> {
    let data: Vec<f64> = (0..24).map(f64::from).collect();
    let host = Array2::from_shape_vec(SHAPE, data.clone()).unwrap();
    let wide = Array2::from_shape_fn([4, 12], |(i, j)| (i * 12 + j) as f64);
    let bytes = 24 * 8;
    let mut all = vec![
        ("empty", pool.empty(cpu, &SHAPE, Order::C).unwrap()),
        ("empty F", pool.empty(cpu, &SHAPE, Order::F).unwrap()),
        ("zeros", pool.zeros(cpu, &SHAPE).unwrap()),
        ("full", pool.full(cpu, &SHAPE, 2.5).unwrap()),
        ("from_slice", pool.from_slice(cpu, &SHAPE, &data).unwrap()),
        ("from_ndarray", pool.from_ndarray(cpu, host.view()).unwrap()),
        // A strided host view: gathered on the host first.
        ("from_ndarray strided", pool.from_ndarray(cpu, wide.slice(s![.., ..;2])).unwrap()),
        (
            "allocate + from_buffer",
            NDBuffer::from_buffer(pool.allocate(bytes).unwrap().into_buffer(cpu).unwrap(), &SHAPE, Order::C)
                .unwrap(),
        ),
        (
            "allocate_on + from_buffer_layout",
            NDBuffer::from_buffer_layout(
                pool.allocate_on(bytes, cpu, cpu.default_stream()).unwrap().into_buffer(cpu).unwrap(),
                gpubuf_core::Layout::contiguous(&SHAPE, Order::F).unwrap(),
            )
            .unwrap(),
        ),
    ];
    for (_, a) in &mut all {
        a.view_mut(|mut v| v.iter_mut().zip(&data).for_each(|(x, d)| *x = *d)).unwrap();
    }
    all
}

#[test]
fn pooled_arrays_of_every_constructor_share_a_segment_and_nest_read_in_write() {
    let cpu = CpuBackend::new();
    let pool = MemoryPool::new(cpu.clone());
    let arrays = every_pooled(&cpu, &pool);
    let segment = arrays[0].1.buffer().memory();
    for (name, a) in &arrays {
        assert!(Arc::ptr_eq(segment, a.buffer().memory()), "{name}: not in the first array's segment");
    }
    let base: Vec<f64> = (0..24).map(f64::from).collect();
    // Every ordered pair: read one, write the other from inside the read view. Pairs in
    // both address orders are covered.
    for (i, (un, u)) in arrays.iter().enumerate() {
        for (j, (on, out)) in arrays.iter().enumerate() {
            if i == j {
                continue;
            }
            let k = (i * 10 + j) as f64;
            let r = u.view(|u| out.view_mut(|mut o| o.zip_mut_with(&u, |o, &u| *o = 2.0 * u + k)));
            assert!(matches!(r, Ok(Ok(()))), "{un} read, {on} written: {r:?}");
            let want: Vec<f64> = base.iter().map(|x| 2.0 * x + k).collect();
            assert_eq!(out.view(|o| o.iter().copied().collect::<Vec<_>>()).unwrap(), want, "{on}");
            // Through the backend's own read too.
            assert_eq!(out.to_vec().unwrap(), want, "{on}");
            assert_eq!(u.view(|u| u.iter().copied().collect::<Vec<_>>()).unwrap(), base, "{un} untouched");
            out.view_mut(|mut o| o.iter_mut().zip(&base).for_each(|(x, d)| *x = *d)).unwrap();
        }
    }
}

#[test]
fn the_same_pooled_array_read_and_written_at_once_is_an_error() {
    let cpu = CpuBackend::new();
    let pool = MemoryPool::new(cpu.clone());
    for (name, a) in every_pooled(&cpu, &pool) {
        let before = a.to_vec().unwrap();
        let r = a.view(|_| a.view_mut(|mut v| v.fill(-1.0)));
        assert!(matches!(r, Ok(Err(Error::InvalidArgument(_)))), "{name}: {r:?}");
        let r = a.view_mut(|_| a.view(|v| v.sum()));
        assert!(matches!(r, Ok(Err(Error::InvalidArgument(_)))), "{name}: {r:?}");
        let r = a.view(|_| a.fill(-1.0));
        assert!(matches!(r, Ok(Err(Error::InvalidArgument(_)))), "{name}: {r:?}");
        assert_eq!(a.to_vec().unwrap(), before, "{name}: a refused call wrote nothing");
        // Two reads of the same bytes nest.
        assert_eq!(a.view(|x| a.view(|y| x.sum() + y.sum())).unwrap().unwrap(), 2.0 * 276.0);
    }
}

#[test]
fn backend_operations_inside_a_view_borrow_only_their_bytes() {
    let cpu = CpuBackend::new();
    let pool = MemoryPool::new(cpu.clone());
    let u = pool.from_ndarray(&cpu, arr2(&[[1.0, 2.0], [3.0, 4.0]]).view()).unwrap();
    let out = pool.zeros::<_, f64>(&cpu, &[2, 2]).unwrap();
    let third = pool.zeros::<_, f64>(&cpu, &[2, 2]).unwrap();
    assert!(Arc::ptr_eq(u.buffer().memory(), out.buffer().memory()));
    assert!(Arc::ptr_eq(u.buffer().memory(), third.buffer().memory()));
    let t = u.transpose(None).unwrap();
    // Inside a read view of `u`: fill, write, strided copy (a gather) and a read of the
    // others, and of `u` itself.
    u.view(|v| {
        out.fill(7.0).unwrap();
        third.set(&[0, 1], v[[1, 0]]).unwrap();
        out.copy_from(&t).unwrap();
        third.buffer().copy_from(0, u.buffer()).unwrap();
        assert_eq!(u.to_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
        // Writing `u` is refused, by every path.
        assert!(u.fill(0.0).is_err());
        assert!(u.copy_from(&out).is_err());
        assert!(u.buffer().write(0, &[0; 8]).is_err());
    })
    .unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![1.0, 3.0, 2.0, 4.0]);
    assert_eq!(third.to_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    // Inside a write view of `out`: reading it is refused, the others work.
    out.view_mut(|mut o| {
        assert!(out.to_vec().is_err());
        assert!(third.copy_from(&out).is_err());
        out.copy_from(&u).unwrap_err();
        third.copy_from(&u).unwrap();
        o.fill(0.0);
    })
    .unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0.0; 4]);
    // A diffusion step, every field on the device: read `u`, write `out`, no host copies.
    u.view(|u| {
        out.view_mut(|mut o| {
            for (i, mut row) in o.axis_iter_mut(Axis(0)).enumerate() {
                let r: ArrayView2<'_, f64> = u.view().into_dimensionality().unwrap();
                row.assign(&(&r.row(i) * 0.5));
            }
        })
    })
    .unwrap()
    .unwrap();
    assert_eq!(out.to_vec().unwrap(), vec![0.5, 1.0, 1.5, 2.0]);
}

#[test]
fn a_block_buffer_spans_the_whole_block_and_frees_it_at_its_end() {
    let cpu = CpuBackend::new();
    let pool = MemoryPool::new(cpu.clone());
    let block = pool.allocate(100).unwrap();
    let whole = block.block_size();
    assert!(whole > 100, "a request of 100 bytes is padded to its size class: {whole}");
    let buf = block.into_block_buffer(&cpu).unwrap();
    assert_eq!(buf.len(), whole);
    assert_eq!(pool.active_blocks(), 1);
    drop(buf);
    assert_eq!(pool.active_blocks(), 0);
    let asked = pool.allocate(100).unwrap().into_buffer(&cpu).unwrap();
    assert_eq!(asked.len(), 100);
}
