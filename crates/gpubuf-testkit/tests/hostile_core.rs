//! Hostile inputs to gpubuf-core, the backends' transfers and plan launches, and
//! gpubuf-buffer: extreme numbers (0, 1, `usize::MAX`, 2^62, `isize::MIN` strides, empty
//! shapes, huge offsets) in every constructor and operation. Nothing may panic, abort or
//! wrap: each call gives a typed error or a result checked against a model, an operation
//! that fails leaves the memory as it was, and the objects stay usable.
//!
//! Sizes are drawn either small or at least 2^50, so nothing here ever allocates, or
//! materialises, more than a few kilobytes.

use gpubuf::encode::encode;
use gpubuf::{
    checked_size, Buffer, CopyPlan, DType, Error, Kernels, Layout, MemRef, NDBuffer, Order, Result, Segment,
    MAX_DIMS,
};
use gpubuf_testkit::exec::{download, upload};
use gpubuf_testkit::hostile::{big_usize, failed, fits, length, offset, prop_err, runner};
use gpubuf_testkit::strategies::bytes;
use gpubuf_testkit::{backend_tests, reference};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::cell::Cell;
use std::collections::HashSet;

/// Mostly small strides, sometimes one at the edge of `isize`.
fn big_isize() -> impl Strategy<Value = isize> {
    let edges = vec![isize::MIN, isize::MIN + 1, isize::MAX, 1 << 62, -(1 << 62), 1 << 50, -(1 << 50)];
    prop_oneof![3 => -4isize..5, 1 => prop::sample::select(edges)]
}

/// Extents: small (0 included) or at least 2^50, so any product is tiny or unallocatable.
fn extent() -> impl Strategy<Value = usize> {
    let edges = vec![usize::MAX, isize::MAX as usize, 1 << 62, 1 << 50];
    prop_oneof![4 => 0usize..4, 1 => prop::sample::select(edges)]
}

/// A layout from extreme parts, and extreme arguments for its operations.
fn layout_parts() -> impl Strategy<Value = (Vec<usize>, Vec<isize>, usize)> {
    (0usize..=5).prop_flat_map(|nd| {
        (prop::collection::vec(extent(), nd), prop::collection::vec(big_isize(), nd), big_usize())
    })
}

/// Every `Layout` operation on extreme layouts and arguments: typed errors, and results
/// consistent with each other (indices inside the span, slices inside the view).
#[test]
fn layouts_never_panic_or_wrap() {
    let args = (layout_parts(), prop::collection::vec(big_usize(), 0..=5), big_usize(), any::<u64>());
    let built = Cell::new(0);
    runner(256)
        .run(&args, |((shape, strides, offset), picks, other, seed)| {
            let contiguous = Layout::contiguous(&shape, Order::C);
            if let Ok(c) = &contiguous {
                prop_assert_eq!(Some(c.size()), checked_size(&shape).ok());
                if c.size() > 0 {
                    prop_assert_eq!(c.span().ok().flatten(), Some(0..c.size()));
                }
                prop_assert!(c.is_c_contiguous());
            }
            let Ok(l) = Layout::new(shape.clone(), strides, offset) else { return Ok(()) };
            built.set(built.get() + 1);
            prop_assert!(contiguous.is_ok(), "a layout exists, so its contiguous twin does");
            let span = l.span();
            prop_assert!(span.is_ok(), "new() checked the span: {:?}", span);
            let span = span.unwrap_or(None);
            let _ = (l.is_c_contiguous(), l.is_f_contiguous(), l.check_fits(other));
            // A valid index maps inside the span; an arbitrary one is an error or inside too.
            let nd = l.ndim();
            let pick = |k: usize| picks.get(k).copied().unwrap_or(seed as usize >> (k % 8));
            let valid: Vec<usize> = (0..nd).map(|k| pick(k) % shape[k].max(1)).collect();
            if let Some(r) = &span {
                let at = l.index_of(&valid);
                prop_assert!(at.as_ref().is_ok_and(|a| r.contains(a)), "{:?} -> {:?} in {:?}", valid, at, r);
            }
            let raw: Vec<usize> = (0..nd).map(pick).collect();
            if let (Ok(at), Some(r)) = (l.index_of(&raw), &span) {
                prop_assert!(r.contains(&at));
            }
            // Slices: ranges from the picks (some reversed or past the end).
            let ranges: Vec<_> = (0..nd).map(|k| (pick(k) % 4)..pick(k + 1) % 5).collect();
            if let Ok(s) = l.sliced(&ranges) {
                if let (Some(sub), Some(r)) = (s.span().ok().flatten(), &span) {
                    prop_assert!(r.start <= sub.start && sub.end <= r.end, "{:?} in {:?}", sub, r);
                }
            }
            for ax in [0, nd.saturating_sub(1), pick(0)] {
                if let Ok(f) = l.flipped(ax) {
                    prop_assert_eq!(
                        f.span().ok().flatten(),
                        span.clone(),
                        "a flip touches the same elements"
                    );
                }
            }
            let perm: Vec<usize> = (0..nd).rev().collect();
            prop_assert_eq!(l.permuted(&perm).ok(), Some(l.transposed()));
            let _ = l.reshaped(&[l.size()]);
            let _ = l.reshaped(&raw);
            // Moved anywhere: operations answer, never wrap.
            let moved = l.clone().with_offset(other);
            if let Ok(Some(r)) = moved.span() {
                prop_assert!(moved.index_of(&valid).is_ok_and(|a| r.contains(&a)));
            }
            let _ = (moved.sliced(&ranges), moved.flipped(0), moved.check_fits(usize::MAX));
            let _ = Segment::from_layout(pick(2), &moved, other);
            // Segments of the view cover it exactly.
            if let Ok(segs) = Segment::from_layout(0, &l, 0) {
                let total: usize = segs.iter().map(Segment::len).sum();
                prop_assert_eq!(total, l.size());
                if let Some(r) = &span {
                    let plan = CopyPlan::new(vec![r.end], total, segs);
                    prop_assert!(plan.is_ok(), "{:?}", plan.err());
                }
            }
            Ok(())
        })
        .unwrap();
    assert!(built.get() >= 32, "valid layouts are exercised: {}", built.get());
}

/// A segment from extreme parts.
fn segment() -> impl Strategy<Value = Segment> {
    (
        (0usize..3, big_usize(), big_usize()),
        prop::collection::vec((extent(), big_isize()), 0..=MAX_DIMS),
        any::<bool>(),
    )
        .prop_map(|((source, offset, dst), dims, negate)| {
            let mut extents = [1; MAX_DIMS];
            let mut strides = [0; MAX_DIMS];
            for (k, (n, s)) in dims.into_iter().enumerate() {
                extents[k] = n;
                strides[k] = s;
            }
            Segment { source, offset, extents, strides, dst_offset: dst % 64, negate }
        })
}

/// Segments, plans and their checks on extreme numbers: construction errors are typed,
/// valid plans stay inside their declared lengths, and the scatter check agrees with a
/// plain set of indices.
#[test]
fn plans_never_panic_or_wrap() {
    let args =
        (prop::collection::vec(segment(), 0..4), prop::collection::vec(big_usize(), 0..3), big_usize());
    runner(256)
        .run(&args, |(segs, lens, buffer_len)| {
            for s in &segs {
                let dims: Vec<(usize, isize)> =
                    s.extents.iter().copied().zip(s.strides.iter().copied()).collect();
                let built = Segment::new(s.source, s.offset, &dims, s.dst_offset);
                prop_assert_eq!(built.is_ok(), s.checked_len().is_some());
                prop_assert_eq!(s.is_empty(), s.checked_len() == Some(0));
                if s.len() <= 4096 {
                    let mut n = 0;
                    s.for_each(|_, _| n += 1);
                    prop_assert!(n == s.len() || n == 0, "all or (outside isize) nothing");
                }
            }
            let Ok(plan) = CopyPlan::new(lens.clone(), buffer_len % 4096, segs.clone()) else {
                return Ok(());
            };
            let total = plan.total();
            prop_assert!(total <= plan.buffer_len());
            let enc = encode(&plan);
            prop_assert_eq!(enc.total, total);
            prop_assert!(enc.starts.iter().all(|&w| w >= 0) && enc.segments.len() == enc.nseg() * 12);
            for max in [1, 2, usize::MAX] {
                let parts = plan.split_by_source(max).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(parts.iter().map(|p| p.1.total()).sum::<usize>(), total);
            }
            // Every element index lies in its source; the scatter check matches a set.
            let mut seen = HashSet::new();
            let mut twice = false;
            for s in plan.segments() {
                s.for_each(|_, at| {
                    assert!(
                        at < lens[s.source],
                        "index {at} inside source {} of {}",
                        s.source,
                        lens[s.source]
                    );
                    twice |= !seen.insert((s.source, at));
                });
            }
            let check = plan.check_scatter();
            prop_assert_eq!(check.is_err(), twice, "{:?}", check);
            if let Err(e) = check {
                prop_assert!(matches!(e, Error::InvalidPlan(_)), "{:?}", e);
            }
            Ok(())
        })
        .unwrap();
}

/// Gathers and scatters whose declared lengths, offsets and ranges are extreme: accepted
/// exactly when every range lies in its allocation and holds the plan (in bytes, for the
/// dtype), with the reference's result; otherwise nothing written.
fn launches_never_panic<B: Kernels>(b: &B) -> Result<()> {
    let s = b.default_stream();
    let src = upload(b, &bytes(64, 3))?;
    let buf = upload(b, &bytes(64, 4))?;
    let seg = (0usize..4, 0usize..5, -1isize..3, 0usize..3, any::<bool>());
    // Element counts mostly small; byte ranges mostly exact, to the end, or extreme.
    let count = || prop_oneof![3 => 3usize..9, 1 => big_usize()];
    let range = || (prop_oneof![3 => Just(0), 1 => offset()], 0u8..4, length());
    let refs = (range(), range());
    let args = (prop::sample::select(DType::ALL.to_vec()), count(), count(), seg, refs, any::<bool>());
    let accepted = Cell::new(0);
    runner(192)
        .run(
            &args,
            |(dtype, src_len, buf_len, (off, n, stride, dst, neg), ((so, sk, sl), (bo, bk, bl)), gather)| {
                let Ok(seg) = Segment::new(0, off, &[(n, stride)], dst) else { return Ok(()) };
                let Ok(plan) = CopyPlan::new(vec![src_len], buf_len, vec![seg.negated(neg)]) else {
                    return Ok(());
                };
                let prepared = b.prepare(&plan, dtype).map_err(failed)?;
                let w = dtype.size();
                let pick = |o: usize, k: u8, l: usize, elems: usize| match k {
                    0 | 1 => elems.saturating_mul(w),
                    2 => 64usize.saturating_sub(o),
                    _ => l,
                };
                let (sl, bl) = (pick(so, sk, sl, src_len), pick(bo, bk, bl, buf_len));
                let holds = |o: usize, l: usize, elems: usize| {
                    // Elements are aligned to their size, at most 8 bytes (complex128).
                    let align = w.min(8);
                    fits(o, l, 64) && (elems as u128) * (w as u128) <= l as u128 && o % align == 0
                };
                let ok = holds(so, sl, src_len)
                    && holds(bo, bl, buf_len)
                    && (gather || !(stride == 0 && n > 1))
                    && (!plan.negates() || dtype.negatable());
                let (a, z) = (
                    MemRef { memory: &src, offset: so, len: sl },
                    MemRef { memory: &buf, offset: bo, len: bl },
                );
                let r =
                    if gather { b.gather(s, &prepared, &[a], z) } else { b.scatter(s, &prepared, z, &[a]) };
                prop_assert_eq!(
                    r.is_ok(),
                    ok,
                    "{:?} {:?} src {}+{} buf {}+{}: {:?}",
                    dtype,
                    plan,
                    so,
                    sl,
                    bo,
                    bl,
                    r
                );
                accepted.set(accepted.get() + usize::from(ok));
                let (mut want_src, mut want_buf) = (bytes(64, 3), bytes(64, 4));
                if ok {
                    let (sr, br) = (so..so + src_len * w, bo..bo + buf_len * w);
                    if gather {
                        let got =
                            reference::gather(&plan, dtype, &[want_src[sr].to_vec()], &want_buf[br.clone()]);
                        want_buf[br].copy_from_slice(&got);
                    } else {
                        let got =
                            reference::scatter(&plan, dtype, &want_buf[br], &[want_src[sr.clone()].to_vec()]);
                        want_src[sr].copy_from_slice(&got[0]);
                    }
                }
                prop_assert_eq!(download(b, &src).map_err(failed)?, want_src);
                prop_assert_eq!(download(b, &buf).map_err(failed)?, want_buf);
                b.write(s, &src, 0, &bytes(64, 3)).map_err(failed)?;
                b.write(s, &buf, 0, &bytes(64, 4)).map_err(failed)?;
                Ok(())
            },
        )
        .map_err(prop_err)?;
    assert!(accepted.get() >= 16, "the model's valid side is exercised: {}", accepted.get());
    Ok(())
}

backend_tests!(launches_never_panic);

/// The value of `layout` in a host model of the storage (f32 elements), in C order.
fn model_values(layout: &Layout, storage: &[f32]) -> Vec<f32> {
    let shape = layout.shape();
    let mut out = Vec::with_capacity(layout.size());
    let mut index = vec![0usize; shape.len()];
    for _ in 0..layout.size() {
        out.push(layout.index_of(&index).map_or(f32::NAN, |at| storage[at]));
        for ax in (0..shape.len()).rev() {
            index[ax] += 1;
            if index[ax] < shape[ax] {
                break;
            }
            index[ax] = 0;
        }
    }
    out
}

/// Buffers and n-d views with extreme ranges, layouts and shapes: constructors refuse
/// what does not fit, every view operation answers like the host model (or with a typed
/// error for what cannot exist), and the storage is written only by writes that succeed.
fn buffers_never_panic<B: Kernels>(b: &B) -> Result<()> {
    let init: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let buf = Buffer::from_bytes(b, bytemuck::cast_slice(&init))?;
    let args = (layout_parts(), offset(), length(), prop::collection::vec(big_usize(), 0..=5), 0u8..4);
    runner(128)
        .run(&args, |((shape, strides, off), at, len, picks, op)| {
            let sl = buf.slice(at..len);
            prop_assert_eq!(sl.as_ref().map(Buffer::len).ok(), (at <= len && len <= 64).then(|| len - at));
            let shared = Buffer::from_shared(b, buf.memory().clone(), at..len);
            prop_assert_eq!(shared.is_ok(), at <= len && len <= 64);
            let host = vec![0u8; len % 9];
            prop_assert_eq!(buf.read_into(at, &mut host.clone()).is_ok(), fits(at, host.len(), 64));
            prop_assert_eq!(buf.write(at, &host).is_ok(), fits(at, host.len(), 64));
            buf.write(0, bytemuck::cast_slice(&init)).map_err(failed)?;
            let sizes = NDBuffer::<B, f32>::zeros(b, &shape);
            // Extents are tiny or at least 2^50: either it fits, or it cannot exist (or its
            // strides cannot, even when empty).
            let nonzero = shape.iter().try_fold(1usize, |a, &n| a.checked_mul(n.max(1)));
            let small = nonzero.is_some_and(|n| n <= isize::MAX as usize)
                && checked_size(&shape).is_ok_and(|n| n <= 4096);
            prop_assert_eq!(sizes.is_ok(), small, "{:?}: {:?}", shape, sizes.err());
            let Ok(layout) = Layout::new(shape, strides, off) else { return Ok(()) };
            let fits_buffer = layout.check_fits(16).is_ok();
            let Ok(v) = NDBuffer::<B, f32>::from_buffer_layout(buf.clone(), layout.clone()) else {
                prop_assert!(
                    !fits_buffer || layout.size().checked_mul(4).is_none_or(|n| n > isize::MAX as usize)
                );
                return Ok(());
            };
            let index: Vec<usize> = (0..v.ndim()).map(|k| picks.get(k).copied().unwrap_or(0)).collect();
            let got = v.get(&index);
            prop_assert_eq!(
                got.ok(),
                layout
                    .index_of(&index)
                    .ok()
                    .filter(|_| index.iter().zip(v.shape()).all(|(i, n)| i < n))
                    .map(|i| init[i])
            );
            let view = match op {
                0 => v.clone(),
                1 => v.transpose(None).map_err(failed)?,
                2 => match v.flip(picks.first().copied().unwrap_or(0)) {
                    Ok(f) => f,
                    Err(_) => v.clone(),
                },
                _ => match v
                    .slice(&index.iter().zip(v.shape()).map(|(&i, &n)| i.min(n)..n).collect::<Vec<_>>())
                {
                    Ok(f) => f,
                    Err(_) => v.clone(),
                },
            };
            let small = view.nbytes() <= 4096;
            let model = if small { model_values(view.layout(), &init) } else { Vec::new() };
            match view.to_vec() {
                Ok(got) => prop_assert!(
                    small
                        && got.iter().zip(&model).all(|(a, b)| a.to_bits() == b.to_bits())
                        && got.len() == model.len()
                ),
                Err(e) => prop_assert!(!small && matches!(e, Error::OutOfMemory { .. }), "{:?}", e),
            }
            prop_assert_eq!(view.copy().is_ok(), small);
            let _ = view.reshape(&[view.size()]);
            match view.fill(-1.0) {
                Ok(()) => prop_assert!(small && view.all_equal(-1.0).map_err(failed)?),
                Err(e) => {
                    prop_assert!(matches!(e, Error::InvalidPlan(_) | Error::OutOfMemory { .. }), "{:?}", e)
                }
            }
            // Usable afterwards: the storage round-trips.
            buf.write(0, bytemuck::cast_slice(&init)).map_err(failed)?;
            prop_assert_eq!(buf.to_vec().map_err(failed)?, bytemuck::cast_slice::<f32, u8>(&init).to_vec());
            Ok(())
        })
        .map_err(prop_err)
}

backend_tests!(buffers_never_panic);

/// Zero-copy ndarray views of CPU memory on extreme layouts: accepted exactly when the
/// view fits, with the model's values; mutable views refuse repeated elements.
#[test]
fn cpu_arrays_never_panic() {
    use gpubuf::cpu::{with_array, with_array_mut};
    let cpu = gpubuf_testkit::cpu();
    let init: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let mem = upload(&cpu, bytemuck::cast_slice(&init)).unwrap();
    let fitting = Cell::new(0);
    runner(2048)
        .run(&layout_parts(), |(shape, strides, off)| {
            let Ok(layout) = Layout::new(shape, strides, off) else { return Ok(()) };
            let fits_mem = layout.check_fits(16).is_ok();
            fitting.set(fitting.get() + usize::from(fits_mem));
            // A broadcast view may hold 2^50 elements: those are counted, not collected.
            let got = with_array::<f32, _>(&mem, &layout, |v| {
                (v.len(), (v.len() <= 4096).then(|| v.iter().copied().collect::<Vec<f32>>()))
            });
            prop_assert_eq!(got.is_ok(), fits_mem, "{:?}", got);
            if let Ok((n, vals)) = got {
                prop_assert_eq!(n, layout.size());
                if let Some(vals) = vals {
                    prop_assert_eq!(vals, model_values(&layout, &init));
                }
            }
            let r = with_array_mut::<f32, _>(&mem, &layout, |mut v| v.iter_mut().for_each(|x| *x += 0.5));
            prop_assert!(r.is_ok() || !fits_mem || layout.size() > 1, "{:?}", r);
            if r.is_ok() {
                let after = with_array::<f32, _>(&mem, &layout, |v| v.iter().copied().collect::<Vec<f32>>());
                let want: Vec<f32> = model_values(&layout, &init).iter().map(|x| x + 0.5).collect();
                prop_assert_eq!(after.ok(), Some(want));
            }
            gpubuf::Backend::write(
                &cpu,
                gpubuf::Backend::default_stream(&cpu),
                &mem,
                0,
                bytemuck::cast_slice(&init),
            )
            .map_err(failed)?;
            Ok(())
        })
        .unwrap();
    assert!(fitting.get() >= 100, "views that fit are exercised: {}", fitting.get());
}
