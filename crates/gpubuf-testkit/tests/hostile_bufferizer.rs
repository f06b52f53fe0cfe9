//! Hostile input for the bufferizer, on every backend: extreme shapes, counts, dtypes, byte
//! lengths, inputs that alias the storage and injected driver failures give typed errors
//! (never a panic), a refused operation changes nothing, and the bufferizer stays usable.

mod faulty;

use faulty::Faulty;
use gpubuf::bufferizer::{Bufferizer, Input};
use gpubuf::pool::MemoryPool;
use gpubuf::{DType, Error, Kernels, Layout, NDBuffer, Result};
use gpubuf_testkit::backend_tests;
use ndarray::{Array1, Array2};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::{Arc, Mutex};

const EL: usize = 2;
const CAP: usize = 5;

/// A number that is often extreme.
fn num() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..7,
        1 => Just(usize::MAX),
        1 => Just(usize::MAX - 1),
        1 => Just(1usize << 62),
        1 => Just(1usize << 31),
    ]
}

/// Constructors with extreme element shapes and capacities: an error unless the buffer
/// fits, and a bufferizer that was built works.
fn hostile_constructors<B: Kernels>(b: &B) -> Result<()> {
    let pool = MemoryPool::new(b.clone());
    let shapes: [&[usize]; 9] =
        [&[], &[0], &[1], &[usize::MAX, 2], &[1 << 62], &[1 << 31, 1 << 31], &[0, usize::MAX], &[3, 0], &[2]];
    for shape in shapes {
        for cap in [0usize, 1, 3, usize::MAX, 1 << 62, 1 << 60, 1 << 40] {
            let bytes =
                shape.iter().try_fold(4usize, |a, &n| a.checked_mul(n)).and_then(|n| n.checked_mul(cap));
            let small = cap > 0 && bytes.is_some_and(|n| n <= 1 << 20);
            for pooled in [false, true] {
                let built = if pooled {
                    Bufferizer::<B, f32>::builder(b, shape, cap).pool(&pool).build()
                } else {
                    Bufferizer::<B, f32>::new(b, shape, cap, None)
                };
                // A shape ndarray itself refuses (non-zero extents past isize::MAX) is refused.
                let valid = shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n.max(1)));
                let small =
                    small && valid.and_then(|v| v.checked_mul(cap)).is_some_and(|v| v <= isize::MAX as usize);
                match built {
                    Ok(mut buf) => {
                        assert!(small, "{shape:?} x {cap} was accepted");
                        let vals = vec![1.5f32; bytes.unwrap_or(0) / 4 / cap];
                        let one =
                            Input::Bytes { shape, dtype: DType::F32, bytes: bytemuck::cast_slice(&vals) };
                        buf.append(one)?;
                        assert_eq!(buf.len(), 1);
                        assert!(buf.filled()?.all_equal(1.5)?);
                        assert_eq!(buf.view()?.shape()[0], cap);
                        buf.flush(2.0)?;
                        let _ = buf.take_batch()?;
                        buf.allocate()?;
                    }
                    Err(e) => assert!(!small, "{shape:?} x {cap} refused: {e}"),
                }
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Op {
    /// Raw bytes: shape, dtype (0 f32, 1 i32, 2 u8), a byte count off by -1/0/+1, how.
    Bytes(Vec<usize>, u8, i8, u8, i16),
    /// A host batch of `n` elements (`None`: one element), transposed storage or not.
    Host(Option<usize>, bool, u8, i16),
    /// A view of the bufferizer's own storage: rows `p..p + n`, flipped (strided) or not.
    Alias(usize, usize, bool, u8),
    /// A list of `k` host elements with one bad element at `j` of kind 0..4.
    List(usize, Option<(usize, u8)>, i16),
    Flush(i16),
    Clear,
    Take,
    Allocate,
    /// Fail the next operation's device work after `n` calls.
    Fault(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let x = -100i16..100;
    prop_oneof![
        (prop::collection::vec(num(), 0..4), 0u8..3, -1i8..=1, 0u8..3, x.clone())
            .prop_map(|(s, d, o, h, x)| Op::Bytes(s, d, o, h, x)),
        (prop::option::of(0usize..7), any::<bool>(), 0u8..3, x.clone())
            .prop_map(|(n, t, h, x)| Op::Host(n, t, h, x)),
        (num(), 0usize..3, any::<bool>(), 0u8..3).prop_map(|(p, n, f, h)| Op::Alias(p, n, f, h)),
        (0usize..5, prop::option::of((0usize..5, 0u8..4)), x.clone()).prop_map(|(k, b, x)| Op::List(k, b, x)),
        x.prop_map(Op::Flush),
        Just(Op::Clear),
        Just(Op::Take),
        Just(Op::Allocate),
        (0usize..3).prop_map(Op::Fault),
    ]
}

/// `n` elements whose element `j` holds `x + j` and `x + j + 0.5`.
fn elems(n: usize, x: i16) -> Array2<f32> {
    Array2::from_shape_fn((n, EL), |(j, c)| f32::from(x) + j as f32 + 0.5 * c as f32)
}

/// Which append `how` picks: 0 `append`, 1 `append_one`, 2 `append_multiple`.
fn call<B: Kernels>(buf: &mut Bufferizer<B, f32>, how: u8, input: Input<'_, B, f32>) -> Result<()> {
    match how {
        0 => buf.append(input),
        1 => buf.append_one(input),
        _ => buf.append_multiple(input),
    }
}

/// How many elements an append of `shape` by `how` adds, if the shape suits it.
fn adds(how: u8, shape: &[usize]) -> Option<usize> {
    let batch = (shape.len() == 2 && shape[1] == EL).then(|| shape[0]);
    match how {
        1 => (shape == [EL]).then_some(1),
        2 => batch,
        _ => (shape == [EL]).then_some(1).or(batch),
    }
}

/// proptest: random operations with often-extreme arguments and injected driver failures
/// against a model of the storage. A refused operation changes nothing; an accepted one
/// does what the model says; a driver failure keeps `len()` (an append may leave data past
/// `len()`, as documented).
fn hostile_ops_match_a_model<B: Kernels>(b: &B) -> Result<()> {
    let f = Faulty::new(b);
    let ops = prop::collection::vec(op(), 1..32);
    TestRunner::new(Config { cases: 96, failure_persistence: None, ..Config::default() })
        .run(&ops, |ops| {
            let e = |e: Error| TestCaseError::fail(e.to_string());
            f.disarm();
            let fired: Arc<Mutex<Vec<&'static str>>> = Arc::default();
            let hook = |name: &'static str| {
                let fired = fired.clone();
                move |_: &Bufferizer<Faulty<B>, f32>| {
                    fired.lock().unwrap_or_else(|e| e.into_inner()).push(name)
                }
            };
            let mut buf = Bufferizer::<Faulty<B>, f32>::builder(&f, &[EL], CAP)
                .on_append_one(hook("append"))
                .on_append_multiple(hook("append"))
                .on_full(hook("full"))
                .build()
                .map_err(e)?;
            let mut model = vec![0.0f32; EL * CAP];
            let mut len = 0usize;
            let mut fault = None;
            for (k, op) in ops.iter().enumerate() {
                if let Op::Fault(n) = op {
                    fault = Some(*n);
                    continue;
                }
                f.disarm(); // an operation skipped below leaves no fault armed
                let before = buf.view().and_then(|v| v.to_vec()).map_err(e)?;
                let whole = buf.view().map_err(e)?;
                if let Some(n) = fault.take() {
                    f.fail_after(n); // the operation below meets the failure
                }
                // (would it be accepted, elements added, their values, the result)
                let (valid, n, values, r): (bool, usize, Vec<f32>, Result<()>) = match op {
                    Op::Bytes(shape, d, off, how, x) => {
                        let dtype = [DType::F32, DType::I32, DType::U8][usize::from(*d)];
                        let size = shape.iter().try_fold(4usize, |a, &n| a.checked_mul(n));
                        let want = size.filter(|&n| n <= 1 << 16);
                        let vals: Vec<f32> =
                            (0..want.unwrap_or(0) / 4).map(|i| f32::from(*x) + 0.5 * i as f32).collect();
                        let mut raw: Vec<u8> = bytemuck::cast_slice(&vals).to_vec();
                        match off {
                            -1 => drop(raw.pop()),
                            1 => raw.push(0),
                            _ => {}
                        }
                        let n = adds(*how, shape);
                        let ok = n.is_some_and(|n| len.checked_add(n).is_some_and(|e| e <= CAP))
                            && *d == 0
                            && want.is_some_and(|w| raw.len() == w);
                        let input = Input::Bytes { shape, dtype, bytes: &raw };
                        (ok, n.unwrap_or(0), vals, call(&mut buf, *how, input))
                    }
                    Op::Host(n, t, how, x) => {
                        let data = elems(n.unwrap_or(1), *x);
                        let owned =
                            if *t { data.t().as_standard_layout().into_owned() } else { data.clone() };
                        let view = if *t { owned.t().into_dyn() } else { owned.view().into_dyn() };
                        let view = if n.is_none() { view.index_axis_move(ndarray::Axis(0), 0) } else { view };
                        let add = adds(*how, view.shape());
                        let ok = add.is_some_and(|a| len + a <= CAP);
                        (
                            ok,
                            add.unwrap_or(0),
                            data.iter().copied().collect(),
                            call(&mut buf, *how, Input::Host(view)),
                        )
                    }
                    Op::Alias(p, rows, flip, how) => {
                        let Some(end) = p.checked_add(*rows).filter(|&e| e <= CAP) else {
                            prop_assert!(whole.slice(&[*p..p.saturating_add(*rows), 0..EL]).is_err());
                            continue;
                        };
                        let mut v = whole.slice(&[*p..end, 0..EL]).map_err(e)?;
                        if *flip && *rows > 1 {
                            v = v.flip(0).map_err(e)?;
                        }
                        let v = if *how == 1 && *rows == 1 { v.reshape(&[EL]).map_err(e)? } else { v };
                        let add = adds(*how, v.shape());
                        let clear = end <= len || *p >= len + add.unwrap_or(0);
                        let strided = *flip && *rows > 1;
                        let ok = add.is_some_and(|a| len + a <= CAP) && clear && !strided;
                        let mut vals = model[p * EL..end * EL].to_vec();
                        if strided {
                            vals = vals.chunks(EL).rev().flatten().copied().collect();
                        }
                        (ok, add.unwrap_or(0), vals, call(&mut buf, *how, Input::Device(&v)))
                    }
                    Op::List(count, bad, x) => {
                        let data = elems(*count, *x);
                        let wrong = Array1::<f32>::zeros(EL + 1);
                        let raw = [0u8; EL * 4];
                        let at_len = whole.slice(&[len.min(CAP - 1)..len.min(CAP - 1) + 1, 0..EL]);
                        let at_len = at_len.and_then(|a| a.reshape(&[EL])).map_err(e)?;
                        let mut list: Vec<Input<'_, Faulty<B>, f32>> =
                            data.outer_iter().map(|r| Input::Host(r.into_dyn())).collect();
                        let mut ok = len + count <= CAP;
                        if let Some((j, kind)) = bad.filter(|(j, _)| *j < *count) {
                            list[j] = match kind {
                                0 => Input::Host(wrong.view().into_dyn()),
                                1 => Input::Bytes { shape: &[EL], dtype: DType::I32, bytes: &raw },
                                2 => Input::Bytes { shape: &[EL], dtype: DType::F32, bytes: &raw[1..] },
                                _ => Input::Device(&at_len),
                            };
                            ok = false;
                        }
                        (ok, *count, data.iter().copied().collect(), buf.append_list(&list))
                    }
                    Op::Flush(x) => {
                        let r = buf.flush(f32::from(*x));
                        if r.is_ok() {
                            model.fill(f32::from(*x));
                            len = 0;
                        }
                        (true, 0, vec![], r)
                    }
                    Op::Clear => {
                        buf.clear();
                        len = 0;
                        (true, 0, vec![], Ok(()))
                    }
                    Op::Take => {
                        let r = buf.take_batch();
                        if let Ok(batch) = &r {
                            f.disarm();
                            prop_assert_eq!(batch.to_vec().map_err(e)?, model[..len * EL].to_vec());
                            model = buf.view().and_then(|v| v.to_vec()).map_err(e)?;
                            len = 0;
                        }
                        (true, 0, vec![], r.map(drop))
                    }
                    Op::Allocate => {
                        let r = buf.allocate();
                        if r.is_ok() {
                            model.fill(0.0);
                            len = 0;
                        }
                        (true, 0, vec![], r)
                    }
                    Op::Fault(_) => (true, 0, vec![], Ok(())),
                };
                f.disarm();
                let after = buf.view().and_then(|v| v.to_vec()).map_err(e)?;
                let appending = matches!(op, Op::Bytes(..) | Op::Host(..) | Op::Alias(..) | Op::List(..));
                match (valid, &r) {
                    (false, _) => {
                        prop_assert!(r.is_err(), "op {} {:?} must fail", k, op);
                        prop_assert_eq!(&after, &before, "op {} {:?} changed the storage", k, op);
                    }
                    (true, Ok(())) if appending => {
                        model[len * EL..(len + n) * EL].copy_from_slice(&values);
                        len += n;
                        // An append hook, then on_full if it filled the buffer; none for no element.
                        let want: &[&str] = match (n, len == CAP) {
                            (0, _) => &[],
                            (_, true) => &["append", "full"],
                            (_, false) => &["append"],
                        };
                        let got = std::mem::take(&mut *fired.lock().unwrap_or_else(|e| e.into_inner()));
                        prop_assert_eq!(got.as_slice(), want, "hooks of op {} {:?}", k, op);
                    }
                    (true, Ok(())) => {}
                    (true, Err(Error::Driver { .. })) => {
                        // Documented: only elements past len() (an append) or any (a flush) moved.
                        let from = if appending { len * EL } else { 0 };
                        prop_assert_eq!(&after[..from], &before[..from]);
                        model[from..].copy_from_slice(&after[from..]);
                    }
                    (true, Err(x)) => return Err(TestCaseError::fail(format!("op {k} {op:?}: {x}"))),
                }
                let stray = std::mem::take(&mut *fired.lock().unwrap_or_else(|e| e.into_inner()));
                prop_assert!(stray.is_empty(), "op {} {:?} fired {:?}", k, op, stray);
                prop_assert_eq!(buf.len(), len, "len after op {} {:?}", k, op);
                prop_assert_eq!(&after, &model, "storage after op {} {:?}", k, op);
            }
            // Still usable: fill it up and hand the batch out.
            f.disarm();
            buf.clear();
            buf.append_multiple(elems(CAP, 7).view()).map_err(e)?;
            prop_assert!(buf.is_full());
            prop_assert_eq!(
                buf.take_batch().and_then(|t| t.to_vec()).map_err(e)?,
                elems(CAP, 7).into_raw_vec_and_offset().0
            );
            Ok(())
        })
        .map_err(|x| Error::invalid(x.to_string()))
}

/// Inputs from another device of the same kind, and device inputs whose view is valid but
/// unaligned in its storage, are refused before anything is copied.
fn foreign_and_unaligned_device_inputs<B: Kernels>(b: &B) -> Result<()> {
    let mut buf = Bufferizer::<B, f32>::new(b, &[EL], CAP, None)?;
    buf.append(Array1::from_elem(EL, 1.0f32).view())?;
    let before = buf.view()?.to_vec()?;
    let bytes = gpubuf::Buffer::from_bytes(b, &[0u8; 4 * (2 * EL + 1)])?;
    // A strided f32 view that starts one byte into its storage: the gather would refuse it.
    if let Ok(odd) =
        NDBuffer::<B, f32>::from_buffer(bytes.slice(1..1 + 4 * 2 * EL)?, &[EL, 2], gpubuf::Order::C)
    {
        let t = odd.transpose(None)?;
        let r = buf.append_multiple(&t);
        assert!(r.is_err() || buf.len() == 3, "{r:?}");
        if r.is_err() {
            assert_eq!((buf.len(), buf.view()?.to_vec()?), (1, before.clone()));
        }
    }
    // A list whose last element aliases the first element's destination copies nothing.
    let whole = buf.view()?;
    let dst = whole.slice(&[1..2, 0..EL])?.reshape(&[EL])?;
    let one = Array1::from_elem(EL, 3.0f32);
    let list = [Input::Host(one.view().into_dyn()), Input::Host(one.view().into_dyn()), Input::Device(&dst)];
    assert!(matches!(buf.append_list(&list), Err(Error::InvalidArgument(_))));
    assert_eq!((buf.len(), buf.view()?.to_vec()?), (1, before));
    Ok(())
}

/// Appends of no element (an empty batch, an empty list, an empty device view at any
/// offset, contiguous or not) are accepted and change nothing: no hook fires, on a full
/// buffer (whose `on_full` they used to fire again) or an empty one. Such a view at an
/// offset past its storage used to be refused (`OutOfBounds`).
fn empty_appends_fire_nothing<B: Kernels>(b: &B) -> Result<()> {
    let log: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let hook = |name: &'static str| {
        let log = log.clone();
        move |_: &Bufferizer<B, f32>| log.lock().unwrap_or_else(|e| e.into_inner()).push(name)
    };
    let mut buf = Bufferizer::<B, f32>::builder(b, &[EL], 2)
        .on_append_one(hook("one"))
        .on_append_multiple(hook("multiple"))
        .on_full(hook("full"))
        .build()?;
    let base = NDBuffer::<B, f32>::zeros(b, &[4, EL])?;
    let empty = |strides: Vec<isize>, offset: usize| {
        let l = Layout::new(vec![0, EL], strides, offset)?;
        NDBuffer::from_buffer_layout(base.buffer().clone(), l)
    };
    let views = [empty(vec![1, 1], 1 << 40)?, empty(vec![-3, 7], usize::MAX / 8)?, empty(vec![2, 1], 8)?];
    let none = Array2::<f32>::zeros((0, EL));
    for round in 0..2 {
        if round == 1 {
            buf.append_multiple(elems(2, 1).view())?;
            assert_eq!(*log.lock().unwrap_or_else(|e| e.into_inner()), ["multiple", "full"]);
            log.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        let before = buf.view()?.to_vec()?;
        let len = buf.len();
        buf.append_multiple(none.view())?;
        buf.append(none.view())?;
        buf.append_list(&[])?;
        buf.append_multiple(Input::Bytes { shape: &[0, EL], dtype: DType::F32, bytes: &[] })?;
        for v in &views {
            buf.append(v)?;
            buf.append_multiple(v)?;
        }
        assert!(log.lock().unwrap_or_else(|e| e.into_inner()).is_empty(), "round {round}: a hook fired");
        assert_eq!(buf.len(), len);
        assert_eq!(buf.view()?.to_vec()?, before);
    }
    // Still checked: the wrong element shape is refused even with no element.
    let wrong = Array2::<f32>::zeros((0, EL + 1));
    assert!(matches!(buf.append_multiple(wrong.view()), Err(Error::ShapeMismatch { .. })));
    Ok(())
}

backend_tests!(
    hostile_constructors,
    hostile_ops_match_a_model,
    foreign_and_unaligned_device_inputs,
    empty_appends_fire_nothing
);
