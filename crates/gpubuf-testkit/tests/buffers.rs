//! Buffer and NDBuffer on every backend.

use gpubuf::{Buffer, DType, Element, Error, Kernels, Layout, NDBuffer, Order, Result};
use gpubuf_testkit::backend_tests;
use gpubuf_testkit::strategies::bytes;
use ndarray::{s, Array, ArrayD, IxDyn};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn values<T: Element>(n: usize, seed: u64) -> Vec<T> {
    let raw = bytes(n * std::mem::size_of::<T>(), seed);
    raw.chunks(std::mem::size_of::<T>()).map(bytemuck::pod_read_unaligned::<T>).collect()
}

/// Same shape and bit-identical elements in logical order (NaN payloads included).
fn same<T: Element>(a: &ArrayD<T>, b: &ArrayD<T>) -> bool {
    a.shape() == b.shape()
        && a.iter().zip(b.iter()).all(|(x, y)| bytemuck::bytes_of(x) == bytemuck::bytes_of(y))
}

/// Host -> NDBuffer -> host for one dtype: contiguous C and F arrays, and non-contiguous
/// views (sliced with steps, transposed, reversed).
fn round_trip_one<B: Kernels, T: Element>(b: &B, shape: &[usize], order: Order, seed: u64) -> Result<()> {
    let n: usize = shape.iter().product();
    let data = values::<T>(n, seed);
    let host = ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| Error::invalid(e.to_string()))?;
    let host =
        if order == Order::F { host.t().as_standard_layout().into_owned().reversed_axes() } else { host };
    let dev = NDBuffer::<B, T>::from_ndarray(b, host.view())?;
    assert_eq!(dev.shape(), shape);
    let back = dev.to_ndarray()?;
    assert!(same(&back, &host));
    // A transposed (non-contiguous) host view.
    let t = host.t();
    let dev_t = NDBuffer::<B, T>::from_ndarray(b, t.view())?;
    assert!(same(&dev_t.to_ndarray()?, &t.to_owned()));
    // The device-side transpose of the upload equals the host transpose.
    assert!(same(&dev.transpose(None)?.to_ndarray()?, &t.to_owned()));
    if shape.len() == 2 {
        let h2 =
            host.clone().into_dimensionality::<ndarray::Ix2>().map_err(|e| Error::invalid(e.to_string()))?;
        let v = h2.slice(s![..;-1, ..;2]);
        let d = NDBuffer::<B, T>::from_ndarray(b, v)?;
        assert!(same(&d.to_ndarray()?, &v.to_owned().into_dyn()));
    }
    Ok(())
}

fn round_trip_dtype<B: Kernels>(b: &B, d: DType, shape: &[usize], order: Order, seed: u64) -> Result<()> {
    match d {
        DType::U8 => round_trip_one::<B, u8>(b, shape, order, seed),
        DType::I32 => round_trip_one::<B, i32>(b, shape, order, seed),
        DType::U32 => round_trip_one::<B, u32>(b, shape, order, seed),
        DType::I64 => round_trip_one::<B, i64>(b, shape, order, seed),
        DType::I8 => round_trip_one::<B, i8>(b, shape, order, seed),
        DType::I16 => round_trip_one::<B, i16>(b, shape, order, seed),
        DType::U16 => round_trip_one::<B, u16>(b, shape, order, seed),
        DType::U64 => round_trip_one::<B, u64>(b, shape, order, seed),
        DType::F16 => round_trip_one::<B, gpubuf::f16>(b, shape, order, seed),
        DType::F32 => round_trip_one::<B, f32>(b, shape, order, seed),
        DType::F64 => round_trip_one::<B, f64>(b, shape, order, seed),
        DType::Bool => round_trip_one::<B, gpubuf::Bool>(b, shape, order, seed),
        DType::Complex64 => round_trip_one::<B, gpubuf::Complex<f32>>(b, shape, order, seed),
        DType::Complex128 => round_trip_one::<B, gpubuf::Complex<f64>>(b, shape, order, seed),
    }
}

/// proptest: random shapes, orders and dtypes round-trip unchanged.
fn ndbuffer_round_trip<B: Kernels>(b: &B) -> Result<()> {
    let strategy = (
        prop::sample::select(DType::ALL.to_vec()),
        prop::collection::vec(0usize..6, 0..=4),
        any::<bool>(),
        any::<u64>(),
    );
    let cases = if cfg!(miri) { 4 } else { 64 };
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
        .run(&strategy, |(d, shape, f, seed)| {
            let order = if f { Order::F } else { Order::C };
            round_trip_dtype(b, d, &shape, order, seed).map_err(|e| TestCaseError::fail(e.to_string()))
        })
        .map_err(|e| Error::invalid(e.to_string()))
}

/// create() with no fill gives zeros even where the allocation held other bytes before.
fn create_fills_zeros_and_values<B: Kernels>(b: &B) -> Result<()> {
    // Dirty some memory first, so a lazily zeroed allocator cannot pass by luck.
    for _ in 0..4 {
        let dirty = NDBuffer::<B, f32>::create(b, &[1024], Order::C, Some(7.5))?;
        assert!(dirty.all_equal(7.5)?);
    }
    let z = NDBuffer::<B, f32>::create(b, &[32, 32], Order::C, None)?;
    assert!(z.all_equal(0.0)?);
    let f = NDBuffer::<B, i64>::create(b, &[3, 5], Order::F, Some(-3))?;
    assert!(f.all_equal(-3)?);
    assert!(!f.all_equal(3)?);
    assert_eq!(f.strides(), &[1, 3]);
    let e = NDBuffer::<B, u8>::empty(b, &[0, 4], Order::C)?;
    assert_eq!((e.size(), e.nbytes()), (0, 0));
    assert!(e.all_equal(1)?, "an empty array is all-equal");
    let nan = NDBuffer::<B, f64>::create(b, &[4], Order::C, Some(f64::NAN))?;
    assert!(nan.all_equal(f64::NAN)?, "NaN equals NaN, as zarr's equal_nan=True");
    Ok(())
}

/// Views: transpose, slice and flip share storage; reshape is a view when contiguous.
fn views_share_storage<B: Kernels>(b: &B) -> Result<()> {
    let host = Array::from_shape_vec((3, 4), (0..12).map(|v| v as f32).collect::<Vec<_>>())
        .map_err(|e| Error::invalid(e.to_string()))?;
    let a = NDBuffer::<B, f32>::from_ndarray(b, host.view())?;
    let t = a.transpose(None)?;
    assert!(std::sync::Arc::ptr_eq(t.buffer().memory(), a.buffer().memory()));
    t.set(&[3, 0], 100.0)?;
    assert_eq!(a.get(&[0, 3])?, 100.0, "a write through the transpose is visible in the original");
    let sl = a.slice(&[1..3, 1..3])?;
    assert_eq!(sl.to_vec()?, vec![5.0, 6.0, 9.0, 10.0]);
    let fl = a.flip(0)?;
    assert_eq!(fl.get(&[0, 0])?, 8.0);
    let r = a.reshape(&[2, 6])?;
    assert!(std::sync::Arc::ptr_eq(r.buffer().memory(), a.buffer().memory()));
    assert_eq!(r.get(&[1, 0])?, 6.0);
    // Reshaping a non-contiguous view copies.
    let rt = t.reshape(&[12])?;
    assert!(!std::sync::Arc::ptr_eq(rt.buffer().memory(), a.buffer().memory()));
    assert_eq!(rt.to_vec()?, vec![0.0, 4.0, 8.0, 1.0, 5.0, 9.0, 2.0, 6.0, 10.0, 100.0, 7.0, 11.0]);
    // Fill and copy_from through a non-contiguous view touch only the view.
    sl.fill(-1.0)?;
    let mut want = host.clone();
    want[[0, 3]] = 100.0;
    want.slice_mut(s![1..3, 1..3]).fill(-1.0);
    assert_eq!(a.to_ndarray()?, want.clone().into_dyn());
    let col = a.slice(&[0..3, 0..1])?;
    let src = NDBuffer::<B, f32>::from_slice(b, &[3, 1], &[7.0, 8.0, 9.0])?;
    col.copy_from(&src)?;
    want.slice_mut(s![.., 0]).assign(&ndarray::arr1(&[7.0, 8.0, 9.0]));
    assert_eq!(a.to_ndarray()?, want.clone().into_dyn());
    // copy_from between overlapping views of the same storage goes through a temporary.
    let left = a.slice(&[0..3, 0..2])?;
    let right = a.slice(&[0..3, 1..3])?;
    left.copy_from(&right)?;
    let snapshot = want.slice(s![.., 1..3]).to_owned();
    want.slice_mut(s![.., 0..2]).assign(&snapshot);
    assert_eq!(a.to_ndarray()?, want.clone().into_dyn());
    // write_ndarray into a strided view.
    let h = ndarray::arr2(&[[1.0f32, 2.0], [3.0, 4.0]]);
    a.slice(&[1..3, 2..4])?.transpose(None)?.write_ndarray(h.view())?;
    want.slice_mut(s![1..3, 2..4]).assign(&h.t());
    assert_eq!(a.to_ndarray()?, want.into_dyn());
    Ok(())
}

/// copy() makes an independent C-contiguous array.
fn copy_is_independent<B: Kernels>(b: &B) -> Result<()> {
    let a = NDBuffer::<B, i32>::from_slice(b, &[2, 3], &[1, 2, 3, 4, 5, 6])?;
    let c = a.transpose(None)?.copy()?;
    assert!(c.is_c_contiguous());
    assert_eq!(c.to_vec()?, vec![1, 4, 2, 5, 3, 6]);
    c.fill(0)?;
    assert_eq!(a.to_vec()?, vec![1, 2, 3, 4, 5, 6]);
    Ok(())
}

/// from_buffer is zero-copy on the same device; to_backend on the same device too.
fn from_buffer_zero_copy<B: Kernels>(b: &B) -> Result<()> {
    let raw: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let buf = Buffer::from_bytes(b, &raw)?;
    let nd = NDBuffer::<B, f32>::from_buffer(buf.clone(), &[2, 2], Order::C)?;
    nd.set(&[1, 1], 9.0)?;
    assert_eq!(&buf.to_vec()?[12..16], &9.0f32.to_le_bytes());
    let same = nd.to_backend(b)?;
    assert!(std::sync::Arc::ptr_eq(same.buffer().memory(), buf.memory()));
    let other = nd.to_backend(&gpubuf_testkit::cpu())?;
    assert_eq!(other.to_vec()?, vec![1.0, 2.0, 3.0, 9.0]);
    // Errors: too short, misaligned.
    assert!(matches!(
        NDBuffer::<B, f32>::from_buffer(buf.clone(), &[5], Order::C),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(NDBuffer::<B, f32>::from_buffer(buf.slice(2..10)?, &[2], Order::C).is_err());
    Ok(())
}

/// Buffer: slicing, combine, host copies and bounds errors.
fn buffer_basics<B: Kernels>(b: &B) -> Result<()> {
    let a = Buffer::from_bytes(b, b"hello ")?;
    let w = Buffer::from_bytes(b, b"world")?;
    let c = Buffer::combine(b, &[&a, &w])?;
    assert_eq!(c.to_vec()?, b"hello world");
    let sl = c.slice(6..11)?;
    assert_eq!(sl.to_vec()?, b"world");
    sl.write(0, b"W")?;
    assert_eq!(c.to_vec()?, b"hello World");
    assert!(matches!(c.slice(3..20), Err(Error::OutOfBounds { .. })));
    assert!(matches!(sl.write(4, b"xy"), Err(Error::OutOfBounds { .. })));
    let z = Buffer::zeros(b, 100)?;
    assert!(z.to_vec()?.iter().all(|&v| v == 0));
    z.slice(10..20)?.fill(&[1, 2])?;
    let v = z.to_vec()?;
    assert_eq!(&v[8..22], &[0, 0, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 0, 0]);
    assert!(z.fill(&[1, 2, 3]).is_err(), "100 bytes are not whole 3-byte patterns");
    assert!(z.copy_from(0, &z.slice(50..100)?).is_ok());
    assert!(z.slice(0..60)?.copy_from(10, &z.slice(0..50)?).is_err(), "overlapping copy refused");
    Ok(())
}

/// Shape, index and scalar mistakes are typed errors.
fn ndbuffer_errors<B: Kernels>(b: &B) -> Result<()> {
    assert!(matches!(
        NDBuffer::<B, f32>::from_slice(b, &[2, 2], &[1.0; 3]),
        Err(Error::ShapeMismatch { .. })
    ));
    let a = NDBuffer::<B, f32>::zeros(b, &[2, 3])?;
    assert!(matches!(a.reshape(&[4]), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(a.get(&[2, 0]), Err(Error::OutOfBounds { .. })));
    // An index with too few axes is named as an index, not shown as if it were a shape.
    match a.get(&[0]) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains("index [0] has 1 axes, the array has 2 (shape [2, 3])"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(a.as_scalar(), Err(Error::ShapeMismatch { .. })));
    assert!(a.transpose(Some(&[0, 0])).is_err());
    assert!(a.slice(&[0..3, 0..1]).is_err());
    let other = NDBuffer::<B, f32>::zeros(b, &[3, 2])?;
    assert!(matches!(a.copy_from(&other), Err(Error::ShapeMismatch { .. })));
    assert!(NDBuffer::<B, u8>::zeros(b, &[usize::MAX, 4]).is_err());
    let one = NDBuffer::<B, f64>::create(b, &[1, 1], Order::C, Some(2.5))?;
    assert_eq!(one.as_scalar()?, 2.5);
    Ok(())
}

/// Empty views at offsets far past their buffer, broadcasts larger than memory and views
/// whose bytes overflow: typed errors or correct empty results, never a panic, an abort or
/// a write; the buffer stays usable.
fn empty_and_broadcast_views<B: Kernels>(b: &B) -> Result<()> {
    let buf = Buffer::from_bytes(b, &bytes(64, 5))?;
    for layout in [
        Layout::new(vec![0], vec![1], usize::MAX)?,
        Layout::new(vec![3, 0], vec![isize::MIN, 1], 1 << 62)?,
        Layout::new(vec![0, 2], vec![1, 1], isize::MAX as usize)?,
    ] {
        let e = NDBuffer::<B, f64>::from_buffer_layout(buf.clone(), layout)?;
        e.fill(1.0)?;
        assert_eq!(e.to_vec()?, Vec::<f64>::new());
        assert!(e.all_equal(3.0)?);
        assert_eq!(e.copy()?.size(), 0);
        e.copy_from(&NDBuffer::<B, f64>::zeros(b, e.shape())?)?;
        e.write_ndarray(ArrayD::<f64>::zeros(IxDyn(e.shape())).view())?;
        assert_eq!(e.reshape(&[0])?.size(), 0);
        assert_eq!(e.transpose(None)?.flip(0)?.size(), 0);
        assert!(e.get(&vec![0; e.ndim()]).is_err());
    }
    // A broadcast of 2^44 f64 (2^47 bytes) over one element: reads of one element work,
    // anything that would hold all of it is OutOfMemory, writes through it are refused.
    let wide = NDBuffer::<B, f64>::from_buffer_layout(buf.clone(), Layout::new(vec![1 << 44], vec![0], 3)?)?;
    assert_eq!(wide.nbytes(), 1 << 47);
    assert_eq!(
        wide.get(&[(1 << 44) - 1])?,
        f64::from_le_bytes(bytes(64, 5)[24..32].try_into().unwrap_or_default())
    );
    assert!(matches!(wide.fill(1.0), Err(Error::InvalidPlan(_))));
    // Not under Miri: it stops the program on an allocation it cannot back instead of
    // reporting the failure.
    if !cfg!(miri) {
        assert!(matches!(wide.to_vec(), Err(Error::OutOfMemory { .. })));
        assert!(wide.copy().is_err());
    }
    // Too many bytes to exist at all, or past the buffer.
    let huge = Layout::new(vec![1 << 62], vec![0], 0)?;
    assert!(matches!(
        NDBuffer::<B, f64>::from_buffer_layout(buf.clone(), huge),
        Err(Error::InvalidArgument(_))
    ));
    let far = Layout::new(vec![2], vec![1], 1 << 61)?;
    assert!(matches!(
        NDBuffer::<B, f64>::from_buffer_layout(buf.clone(), far),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(NDBuffer::<B, u8>::empty(b, &[0, usize::MAX, 2], Order::C).is_err());
    // Nothing was written, and the buffer still works.
    assert_eq!(buf.to_vec()?, bytes(64, 5));
    let a = NDBuffer::<B, f64>::from_buffer(buf.clone(), &[2, 4], Order::C)?;
    a.flip(1)?.fill(2.5)?;
    assert!(a.all_equal(2.5)?);
    Ok(())
}

backend_tests!(
    ndbuffer_round_trip,
    create_fills_zeros_and_values,
    views_share_storage,
    copy_is_independent,
    from_buffer_zero_copy,
    buffer_basics,
    ndbuffer_errors,
    empty_and_broadcast_views
);
