//! The bufferizer on every backend.

use gpubuf::bufferizer::{Bufferizer, Input};
use gpubuf::pool::MemoryPool;
use gpubuf::{DType, Error, Kernels, NDBuffer, Result};
use gpubuf_testkit::backend_tests;

mod faulty;
use ndarray::{Array, Array2, Array3, Axis};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::{Arc, Mutex};

type Log = Arc<Mutex<Vec<String>>>;

fn logger<B: Kernels>(log: &Log, name: &'static str) -> impl FnMut(&Bufferizer<B, f32>) + Send + 'static {
    let log = log.clone();
    move |b| log.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{name}@{}", b.len()))
}

fn take(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Every hook fires in dolphin's order and the right number of times.
fn hooks_fire_in_order<B: Kernels>(b: &B) -> Result<()> {
    let log: Log = Arc::default();
    let mut buf = Bufferizer::<B, f32>::builder(b, &[2], 4)
        .on_append_one(logger(&log, "one"))
        .on_append_multiple(logger(&log, "multiple"))
        .on_full(logger(&log, "full"))
        .on_flush(logger(&log, "flush"))
        .on_allocate(logger(&log, "allocate"))
        .build()?;
    assert!(take(&log).is_empty(), "the first allocation fires nothing (as dolphin)");
    let e = ndarray::arr1(&[1.0f32, 2.0]);
    buf.append_one(e.view())?;
    buf.append_multiple(Array2::<f32>::ones((2, 2)).view())?;
    buf.append(e.view())?;
    assert_eq!(take(&log), ["one@1", "multiple@3", "one@4", "full@4"]);
    assert!(matches!(buf.append_one(e.view()), Err(Error::Capacity { .. })));
    assert!(take(&log).is_empty(), "a refused append fires nothing");
    buf.flush(0.0)?;
    assert_eq!(take(&log), ["flush@0"]);
    buf.append_list(&[Input::Host(e.view().into_dyn()), Input::Host(e.view().into_dyn())])?;
    assert_eq!(take(&log), ["multiple@2"]);
    buf.allocate()?;
    assert_eq!(take(&log), ["allocate@0", "flush@0"]);
    // Hooks set later replace the ones from the builder.
    buf.set_on_append_one(logger(&log, "later"));
    buf.append(e.view())?;
    assert_eq!(take(&log), ["later@1"]);
    buf.clear_hooks();
    buf.append(e.view())?;
    assert!(take(&log).is_empty());
    Ok(())
}

/// Full, overflow, shape and dtype errors; an overflowing append copies nothing.
fn errors_and_atomic_overflow<B: Kernels>(b: &B) -> Result<()> {
    let mut buf = Bufferizer::<B, f32>::new(b, &[3], 4, None)?;
    let one = ndarray::arr1(&[1.0f32, 2.0, 3.0]);
    buf.append(one.view())?;
    buf.append(one.view())?;
    let before = buf.view()?.to_vec()?;
    // A batch of 3 does not fit in the 2 places left.
    let batch = Array2::<f32>::from_elem((3, 3), 9.0);
    assert!(matches!(
        buf.append_multiple(batch.view()),
        Err(Error::Capacity { capacity: 4, len: 2, adding: 3 })
    ));
    // Nor a list of 3, even though its first two elements would fit.
    let list: Vec<Input<'_, B, f32>> = (0..3).map(|_| Input::Host(one.view().into_dyn())).collect();
    assert!(matches!(buf.append_list(&list), Err(Error::Capacity { .. })));
    assert_eq!(buf.view()?.to_vec()?, before, "nothing was copied");
    assert_eq!(buf.len(), 2);
    // A list with one bad shape copies nothing either.
    let bad = ndarray::arr1(&[1.0f32, 2.0]);
    let mixed = [Input::Host(one.view().into_dyn()), Input::Host(bad.view().into_dyn())];
    assert!(matches!(buf.append_list(&mixed), Err(Error::ShapeMismatch { .. })));
    assert_eq!(buf.len(), 2);
    assert!(matches!(buf.append(bad.view()), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(buf.append(Array3::<f32>::zeros((1, 1, 3)).view()), Err(Error::ShapeMismatch { .. })));
    let raw = [0u8; 12];
    let wrong = Input::Bytes { shape: &[3], dtype: DType::I32, bytes: &raw };
    assert!(matches!(buf.append_one(wrong), Err(Error::DTypeMismatch { .. })));
    let short = Input::Bytes { shape: &[3], dtype: DType::F32, bytes: &raw[..8] };
    assert!(buf.append_one(short).is_err());
    let ok = Input::Bytes { shape: &[3], dtype: DType::F32, bytes: &raw };
    buf.append_one(ok)?;
    assert!(Bufferizer::<B, f32>::new(b, &[3], 0, None).is_err());
    assert!(Bufferizer::<B, f32>::new(b, &[usize::MAX, 2], 2, None).is_err());
    assert_eq!((buf.element_nbytes(), buf.nbytes(), buf.shape()), (12, 48, vec![4, 3]));
    Ok(())
}

/// view() and filled() alias the storage; device inputs (contiguous or strided) copy in.
fn views_alias_the_storage<B: Kernels>(b: &B) -> Result<()> {
    let mut buf = Bufferizer::<B, f32>::new(b, &[2, 3], 3, None)?;
    let view = buf.view()?;
    let dev = NDBuffer::<B, f32>::from_slice(b, &[3, 2], &[1., 2., 3., 4., 5., 6.])?;
    buf.append(&dev.transpose(None)?)?; // strided: a plan gather
    buf.append(&dev.reshape(&[2, 3])?)?; // contiguous: a device copy
    assert_eq!(view.to_vec()?[..12], [1., 3., 5., 2., 4., 6., 1., 2., 3., 4., 5., 6.]);
    assert!(buf.aliases(&view));
    let filled = buf.filled()?;
    assert_eq!(filled.shape(), &[2, 2, 3]);
    filled.set(&[0, 0, 0], 42.0)?;
    assert_eq!(view.get(&[0, 0, 0])?, 42.0, "writes through one view show in the other");
    buf.flush(-1.0)?;
    assert!(view.all_equal(-1.0)?);
    Ok(())
}

/// Double buffering: the batch handed out never aliases the buffer being filled.
fn double_buffering_never_aliases<B: Kernels>(b: &B) -> Result<()> {
    let mut buf = Bufferizer::<B, i32>::new(b, &[4], 2, None)?;
    let e = |v: i32| ndarray::Array1::from_elem(4, v);
    buf.append(e(1).view())?;
    buf.append(e(2).view())?;
    let first = buf.take_batch()?;
    assert!(buf.is_empty());
    assert!(!buf.aliases(&first));
    buf.append(e(3).view())?;
    buf.append(e(4).view())?;
    assert_eq!(first.to_vec()?, [1, 1, 1, 1, 2, 2, 2, 2], "the consumer's batch is untouched");
    // The first batch is still alive: the next buffer must be a third one.
    let second = buf.take_batch()?;
    assert!(!buf.aliases(&first) && !buf.aliases(&second) && !first.buffer().overlaps(second.buffer()));
    buf.append(e(5).view())?;
    assert_eq!(second.to_vec()?, [3, 3, 3, 3, 4, 4, 4, 4]);
    assert_eq!(first.to_vec()?, [1, 1, 1, 1, 2, 2, 2, 2]);
    // Once a batch is dropped its buffer comes back as the spare.
    let second_mem = second.buffer().memory().clone();
    drop(second);
    let third = buf.take_batch()?;
    buf.append(e(6).view())?;
    assert!(std::sync::Arc::ptr_eq(buf.filled()?.buffer().memory(), &second_mem), "spare reused");
    assert_eq!(third.to_vec()?, [5, 5, 5, 5]);
    Ok(())
}

/// Buffers from a memory pool go back to it.
fn pool_backed<B: Kernels>(b: &B) -> Result<()> {
    let pool = MemoryPool::new(b.clone());
    let mut buf = Bufferizer::<B, f32>::builder(b, &[16], 8).pool(&pool).build()?;
    buf.append(ndarray::Array1::<f32>::ones(16).view())?;
    let batch = buf.take_batch()?;
    assert_eq!(pool.active_blocks(), 2);
    drop(buf);
    assert_eq!(pool.active_blocks(), 1, "the batch still holds its block");
    assert!(batch.all_equal(1.0)?);
    drop(batch);
    assert_eq!(pool.active_blocks(), 0);
    Ok(())
}

#[derive(Debug, Clone)]
enum Op {
    One(f32),
    Many(usize, f32),
    List(usize, f32),
    Strided(usize, f32),
    Flush(f32),
    Take,
}

fn op() -> impl Strategy<Value = Op> {
    let v = -100i32..100;
    prop_oneof![
        v.clone().prop_map(|x| Op::One(x as f32)),
        (0usize..5, v.clone()).prop_map(|(n, x)| Op::Many(n, x as f32)),
        (0usize..5, v.clone()).prop_map(|(n, x)| Op::List(n, x as f32)),
        (1usize..4, v.clone()).prop_map(|(n, x)| Op::Strided(n, x as f32)),
        v.prop_map(|x| Op::Flush(x as f32)),
        Just(Op::Take),
    ]
}

/// proptest: random append/flush/take sequences against a plain Vec model.
fn matches_a_vec_model<B: Kernels>(b: &B) -> Result<()> {
    const EL: usize = 3;
    const CAP: usize = 6;
    let ops = prop::collection::vec(op(), 1..40);
    TestRunner::new(Config { cases: 48, failure_persistence: None, ..Config::default() })
        .run(&ops, |ops| {
            let f = |e: Error| TestCaseError::fail(e.to_string());
            let mut buf = Bufferizer::<B, f32>::new(b, &[EL], CAP, None).map_err(f)?;
            let mut model = vec![0.0f32; EL * CAP];
            let mut len = 0usize;
            for (k, o) in ops.into_iter().enumerate() {
                // Element j of an append holds x + j, each component offset by its index.
                let elems = |n: usize, x: f32| -> Array2<f32> {
                    Array::from_shape_fn((n, EL), |(j, c)| x + j as f32 + 0.1 * c as f32)
                };
                let (n, result) = match &o {
                    Op::One(x) => (1, buf.append_one(elems(1, *x).index_axis(Axis(0), 0))),
                    Op::Many(n, x) => (*n, buf.append_multiple(elems(*n, *x).view())),
                    Op::List(n, x) => {
                        let a = elems(*n, *x);
                        let list: Vec<Input<'_, B, f32>> =
                            a.outer_iter().map(|r| Input::Host(r.into_dyn())).collect();
                        (*n, buf.append_list(&list))
                    }
                    Op::Strided(n, x) => {
                        let host = elems(*n, *x);
                        let t = host.t().as_standard_layout().into_owned();
                        let dev = NDBuffer::<B, f32>::from_ndarray(b, t.view()).map_err(f)?;
                        (*n, buf.append_multiple(&dev.transpose(None).map_err(f)?))
                    }
                    Op::Flush(v) => {
                        buf.flush(*v).map_err(f)?;
                        model.iter_mut().for_each(|m| *m = *v);
                        len = 0;
                        (0, Ok(()))
                    }
                    Op::Take => {
                        let batch = buf.take_batch().map_err(f)?;
                        prop_assert_eq!(batch.to_vec().map_err(f)?, model[..len * EL].to_vec());
                        // The new buffer is the old spare or a fresh one: model its content.
                        let content = buf.view().map_err(f)?.to_vec().map_err(f)?;
                        model = content;
                        len = 0;
                        (0, Ok(()))
                    }
                };
                if matches!(o, Op::One(_) | Op::Many(..) | Op::List(..) | Op::Strided(..)) {
                    if len + n > CAP {
                        prop_assert!(matches!(result, Err(Error::Capacity { .. })), "op {} {:?}", k, o);
                    } else {
                        result.map_err(f)?;
                        let a = elems(
                            n,
                            match o {
                                Op::One(x) | Op::Many(_, x) | Op::List(_, x) | Op::Strided(_, x) => x,
                                _ => 0.0,
                            },
                        );
                        model[len * EL..(len + n) * EL].copy_from_slice(a.as_slice().unwrap_or(&[]));
                        len += n;
                    }
                }
                prop_assert_eq!(buf.len(), len);
                prop_assert_eq!(buf.is_full(), len == CAP);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
                let got = buf.view().map_err(f)?.to_vec().map_err(f)?;
                prop_assert_eq!(bits(&got), bits(&model), "after op {} {:?}", k, o);
            }
            Ok(())
        })
        .map_err(|e| Error::invalid(e.to_string()))
}

backend_tests!(
    hooks_fire_in_order,
    errors_and_atomic_overflow,
    views_alias_the_storage,
    double_buffering_never_aliases,
    pool_backed,
    matches_a_vec_model,
    append_list_aliasing_input_copies_nothing,
    append_list_failing_part_way_keeps_len,
    huge_batch_shape_is_a_capacity_error,
    failed_allocate_and_take_batch_change_nothing,
    panicking_hook_stays_registered,
    hooks_read_but_cannot_reenter
);

fn f32s<B: Kernels>(a: &NDBuffer<B, f32>) -> Result<Vec<f32>> {
    a.to_vec()
}

/// Review item 8: a list whose second element cannot be copied (it is a view of the very
/// element it would be copied to) copies nothing, not even its first element.
fn append_list_aliasing_input_copies_nothing<B: Kernels>(b: &B) -> Result<()> {
    let mut buf = Bufferizer::<B, f32>::new(b, &[2], 4, None)?;
    buf.append(ndarray::arr1(&[1.0f32, 2.0]).view())?;
    let whole = buf.view()?;
    let x = ndarray::arr1(&[7.0f32, 8.0]);
    let before = f32s(&whole)?;
    for at in [1usize, 2] {
        let alias = whole.slice(&[at..at + 1, 0..2])?.reshape(&[2])?;
        let list = [Input::Host(x.view().into_dyn()), Input::Device(&alias)];
        assert!(matches!(buf.append_list(&list), Err(Error::InvalidArgument(_))), "at {at}");
        assert_eq!((buf.len(), f32s(&whole)?), (1, before.clone()), "nothing copied (at {at})");
    }
    // A strided view over the storage is refused the same way.
    let strided = whole.transpose(None)?;
    assert!(buf.append_multiple(&strided.transpose(None)?.slice(&[1..3, 0..2])?.transpose(None)?).is_err());
    assert_eq!((buf.len(), f32s(&whole)?), (1, before));
    // An element already appended is a fine input: it is not written by the append.
    let first = buf.filled()?.reshape(&[2])?;
    buf.append_list(&[Input::Device(&first), Input::Host(x.view().into_dyn())])?;
    assert_eq!(f32s(&buf.filled()?)?, [1., 2., 1., 2., 7., 8.]);
    Ok(())
}

/// A driver failure on the k-th copy of a list: `len()` stays, no hook fires, and the next
/// append overwrites what the failed one left past `len()`.
fn append_list_failing_part_way_keeps_len<B: Kernels>(b: &B) -> Result<()> {
    let f = faulty::Faulty::new(b);
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut buf = Bufferizer::<faulty::Faulty<B>, f32>::builder(&f, &[2], 4)
        .on_append_multiple(logger(&log, "multiple"))
        .on_full(logger(&log, "full"))
        .build()?;
    buf.append(ndarray::arr1(&[1.0f32, 2.0]).view())?;
    let rows = Array2::from_shape_fn((3, 2), |(i, j)| (10 * i + j) as f32);
    let list: Vec<Input<'_, faulty::Faulty<B>, f32>> =
        rows.outer_iter().map(|r| Input::Host(r.into_dyn())).collect();
    f.fail_after(1);
    assert!(matches!(buf.append_list(&list), Err(Error::Driver { .. })));
    f.disarm();
    assert_eq!(buf.len(), 1);
    assert!(take(&log).is_empty(), "no hook fires for a failed append");
    assert_eq!(f32s(&buf.view()?)?[2..4], [0., 1.], "documented: the first copy landed past len()");
    buf.append_list(&list[1..])?;
    assert_eq!(f32s(&buf.filled()?)?, [1., 2., 10., 11., 20., 21.]);
    assert_eq!(take(&log), ["multiple@3"]);
    // A failed flush keeps len() too.
    f.fail_after(0);
    assert!(buf.flush(5.0).is_err());
    f.disarm();
    assert_eq!(buf.len(), 3);
    Ok(())
}

/// A batch shape at the end of `usize` is a capacity error, not an overflow.
fn huge_batch_shape_is_a_capacity_error<B: Kernels>(b: &B) -> Result<()> {
    let mut buf = Bufferizer::<B, f32>::new(b, &[2], 4, None)?;
    buf.append(ndarray::arr1(&[1.0f32, 2.0]).view())?;
    for n in [usize::MAX, usize::MAX - 1, 1 << 62] {
        let raw = Input::Bytes { shape: &[n, 2], dtype: DType::F32, bytes: &[] };
        assert!(matches!(buf.append_multiple(raw), Err(Error::Capacity { adding, .. }) if adding == n));
        let raw = Input::Bytes { shape: &[n, 2], dtype: DType::F32, bytes: &[] };
        assert!(matches!(buf.append(raw), Err(Error::Capacity { .. })));
    }
    assert_eq!(buf.len(), 1);
    buf.append(ndarray::arr1(&[3.0f32, 4.0]).view())?;
    assert_eq!(f32s(&buf.filled()?)?, [1., 2., 3., 4.]);
    Ok(())
}

/// `allocate` and `take_batch` failing (allocation or zero fill) change nothing.
fn failed_allocate_and_take_batch_change_nothing<B: Kernels>(b: &B) -> Result<()> {
    let f = faulty::Faulty::new(b);
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut buf = Bufferizer::<faulty::Faulty<B>, f32>::builder(&f, &[2], 2)
        .on_allocate(logger(&log, "allocate"))
        .on_flush(logger(&log, "flush"))
        .build()?;
    buf.append(ndarray::arr1(&[1.0f32, 2.0]).view())?;
    for ok_ops in [0, 1] {
        f.fail_after(ok_ops); // fail the allocation, then the zero fill
        assert!(buf.allocate().is_err());
        f.disarm();
        assert_eq!((buf.len(), f32s(&buf.filled()?)?), (1, vec![1., 2.]));
        assert!(take(&log).is_empty());
    }
    let first = buf.take_batch()?; // the first buffer becomes the spare, still in use
    buf.append(ndarray::arr1(&[3.0f32, 4.0]).view())?;
    let spare_mem = first.buffer().memory().clone();
    for ok_ops in [0, 1] {
        f.fail_after(ok_ops);
        assert!(buf.take_batch().is_err());
        f.disarm();
        assert_eq!((buf.len(), f32s(&buf.filled()?)?), (1, vec![3., 4.]));
    }
    drop(first);
    let second = buf.take_batch()?;
    assert_eq!(f32s(&second)?, [3., 4.]);
    assert!(Arc::ptr_eq(buf.view()?.buffer().memory(), &spare_mem), "the spare survived the failures");
    buf.allocate()?;
    assert_eq!(take(&log), ["allocate@0", "flush@0"]);
    Ok(())
}

/// A hook that panics stays registered, and the append it followed is complete.
fn panicking_hook_stays_registered<B: Kernels>(b: &B) -> Result<()> {
    let calls = Arc::new(Mutex::new(0));
    let c = calls.clone();
    let mut buf = Bufferizer::<B, f32>::new(b, &[1], 4, None)?;
    buf.set_on_append_one(move |_| {
        *c.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        panic!("a hook gives up");
    });
    let one = ndarray::arr1(&[1.0f32]);
    for n in 1..=2 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| buf.append(one.view())));
        assert!(r.is_err());
        assert_eq!(*calls.lock().unwrap_or_else(|e| e.into_inner()), n, "the hook ran again");
        assert_eq!(buf.len(), n);
    }
    buf.clear_hooks();
    buf.append(one.view())?;
    assert_eq!(f32s(&buf.filled()?)?, [1., 1., 1.]);
    Ok(())
}

/// Hooks see the finished operation through `&Bufferizer` and act after it returns.
fn hooks_read_but_cannot_reenter<B: Kernels>(b: &B) -> Result<()> {
    let seen: Arc<Mutex<Vec<Vec<f32>>>> = Arc::default();
    let s = seen.clone();
    let mut buf = Bufferizer::<B, f32>::builder(b, &[1], 2)
        .on_full(move |b| {
            let data = b.filled().and_then(|f| f.to_vec()).unwrap_or_default();
            s.lock().unwrap_or_else(|e| e.into_inner()).push(data);
        })
        .build()?;
    for round in 0..3 {
        buf.append(ndarray::arr1(&[round as f32]).view())?;
        buf.append(ndarray::arr1(&[round as f32 + 0.5]).view())?;
        if buf.is_full() {
            let batch = buf.take_batch()?;
            assert_eq!(batch.shape(), &[2, 1]);
        }
    }
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(seen, [[0.0, 0.5], [1.0, 1.5], [2.0, 2.5]]);
    Ok(())
}
