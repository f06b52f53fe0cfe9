//! Interop: native views of gpubuf memory, foreign memory adopted by gpubuf, and user
//! kernels on gpubuf memory (CPU here; OpenCL in `interop_opencl`).

use gpubuf::cpu::{interop, CpuBackend};
use gpubuf::{Error, MemoryPool, NDBuffer, Result};
use ndarray::{Array2, ArrayD, Axis, IxDyn};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

#[cfg(feature = "opencl")]
#[path = "interop/opencl.rs"]
mod opencl;

#[cfg(feature = "opencl")]
#[path = "interop/opencl_handles.rs"]
mod opencl_handles;

#[cfg(feature = "opencl")]
#[path = "interop/opencl_shared.rs"]
mod opencl_shared;

#[cfg(feature = "cuda")]
#[path = "interop/cuda.rs"]
mod cuda;

#[cfg(feature = "cuda")]
#[path = "interop/cuda_handles.rs"]
mod cuda_handles;

/// The system allocator, counting frees of one watched address; byte allocations of
/// [`ODD`] bytes are placed one byte past an 8-byte boundary (legal for alignment 1), so a
/// test can make a `Vec` that is not adoptable.
struct Counting;
const ODD: usize = 4093;

fn odd_layout() -> Layout {
    Layout::from_size_align(ODD + 8, 8).expect("layout")
}
static WATCH: AtomicUsize = AtomicUsize::new(0);
static FREES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() == ODD && layout.align() == 1 {
            // SAFETY: a non-zero size; one byte in, ODD bytes remain inside the block.
            let p = unsafe { System.alloc(odd_layout()) };
            return if p.is_null() { p } else { p.wrapping_add(1) };
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ptr as usize == WATCH.load(SeqCst) {
            FREES.fetch_add(1, SeqCst);
        }
        if layout.size() == ODD && layout.align() == 1 {
            // SAFETY: `ptr` is one byte into a block allocated above with `odd_layout`.
            return unsafe { System.dealloc(ptr.wrapping_sub(1), odd_layout()) };
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn cpu() -> CpuBackend {
    gpubuf_testkit::cpu()
}

/// Two arrays carved from one pool segment: each view sees its own elements, not the
/// segment's first ones.
#[test]
fn views_of_pooled_arrays_apply_the_buffer_offset() -> Result<()> {
    let cpu = cpu();
    let pool = MemoryPool::new(cpu.clone());
    let a = pool.allocate(64 * 4)?.into_buffer(&cpu)?;
    let b = pool.allocate(64 * 4)?.into_buffer(&cpu)?;
    assert!(Arc::ptr_eq(a.memory(), b.memory()), "small blocks share a segment");
    assert_ne!(a.offset(), b.offset());
    let a = NDBuffer::<_, i32>::from_buffer(a.slice(0..256)?, &[8, 8], gpubuf::Order::C)?;
    let b = NDBuffer::<_, i32>::from_buffer(b.slice(0..256)?, &[8, 8], gpubuf::Order::C)?;
    a.fill(-1)?;
    let data: Vec<i32> = (0..64).collect();
    b.copy_from(&NDBuffer::from_slice(&cpu, &[8, 8], &data)?)?;
    // A strided, flipped, offset view of `b`, read natively and through a plan gather.
    let v = b.slice(&[1..7, 2..8])?.transpose(None)?.flip(0)?;
    let native = interop::view(&v, |x| x.iter().copied().collect::<Vec<i32>>())?;
    assert_eq!(native, v.to_vec()?);
    let expect = Array2::from_shape_vec((8, 8), data).unwrap();
    let mut e = expect.slice(ndarray::s![1..7, 2..8]).reversed_axes();
    e.invert_axis(Axis(0));
    assert_eq!(native, e.iter().copied().collect::<Vec<_>>());
    // Writes land in `b` only.
    interop::view_mut(&v, |mut x| x.fill(7))?;
    assert!(a.all_equal(-1)?);
    assert_eq!(b.slice(&[1..7, 2..8])?.to_vec()?, vec![7; 36]);
    assert_eq!(b.get(&[0, 0])?, 0);
    Ok(())
}

#[test]
fn a_view_refuses_reentrant_access_and_broadcast_writes() -> Result<()> {
    let cpu = cpu();
    let a = NDBuffer::<_, f32>::from_slice(&cpu, &[4], &[1., 2., 3., 4.])?;
    let inner = interop::view(&a, |_| a.fill(0.0))?;
    assert!(matches!(inner, Err(Error::InvalidArgument(_))), "{inner:?}");
    // Reading the bytes a read view borrows is no conflict.
    assert_eq!(interop::view(&a, |_| a.to_vec())??, vec![1., 2., 3., 4.]);
    let layout = gpubuf::Layout::new(vec![3], vec![0], 1)?;
    let bcast = NDBuffer::<_, f32>::from_buffer_layout(a.buffer().clone(), layout)?;
    assert_eq!(interop::view(&bcast, |x| x.iter().copied().collect::<Vec<_>>())?, vec![2.; 3]);
    assert!(matches!(interop::view_mut(&bcast, |_| ()), Err(Error::InvalidArgument(_))));
    Ok(())
}

/// An adopted `Vec` is the array's storage (no copy) and is freed exactly once, when the
/// last view drops.
#[test]
fn an_adopted_vec_is_used_in_place_and_freed_once() -> Result<()> {
    let cpu = cpu();
    let data: Vec<f64> = (0..1000).map(f64::from).collect();
    let ptr = data.as_ptr() as usize;
    assert!(interop::is_adoptable(&data));
    WATCH.store(ptr, SeqCst);
    FREES.store(0, SeqCst);
    let a = interop::adopt_vec(&cpu, data, &[10, 100])?;
    let view = a.slice(&[2..3, 0..100])?;
    assert_eq!(interop::view(&a, |x| x.as_ptr() as usize)?, ptr, "no copy");
    assert_eq!(view.get(&[0, 5])?, 205.0);
    view.set(&[0, 5], -1.0)?;
    drop(a);
    assert_eq!(FREES.load(SeqCst), 0, "a view is still alive");
    assert_eq!(interop::view(&view, |x| x[[0, 5]])?, -1.0);
    drop(view);
    let frees = FREES.load(SeqCst);
    WATCH.store(0, SeqCst);
    assert_eq!(frees, 1);
    Ok(())
}

#[test]
fn an_adopted_array_keeps_its_strides_and_offset() -> Result<()> {
    let cpu = cpu();
    let mut host = ArrayD::from_shape_vec(IxDyn(&[3, 4]), (0..12).collect::<Vec<i64>>()).unwrap();
    host.invert_axis(Axis(1));
    let host = host.reversed_axes();
    let expect: Vec<i64> = host.iter().copied().collect();
    let a = interop::adopt_array(&cpu, host)?;
    assert_eq!(a.shape(), &[4, 3]);
    assert_eq!(a.to_vec()?, expect);
    assert_eq!(interop::view(&a, |x| x.iter().copied().collect::<Vec<_>>())?, expect);
    let shape_err = interop::adopt_vec(&cpu, vec![1u8; 5], &[2, 3]);
    assert!(matches!(shape_err, Err(Error::ShapeMismatch { .. })));
    // Not adoptable (misaligned or empty): copied, same values.
    let bytes: Vec<u8> = (0..17).collect();
    assert!(!interop::is_adoptable(&bytes[1..]));
    let c = interop::adopt_vec(&cpu, bytes[1..].to_vec(), &[16])?;
    assert_eq!(c.to_vec()?, bytes[1..].to_vec());
    assert!(interop::adopt_vec(&cpu, Vec::<f32>::new(), &[0, 3])?.to_vec()?.is_empty());
    Ok(())
}

/// A `Vec` at an address that is not a multiple of 8 is copied into aligned memory (and
/// freed at once), never used misaligned.
#[test]
fn a_misaligned_vec_is_copied_and_freed() -> Result<()> {
    let cpu = cpu();
    let mut data: Vec<u8> = Vec::with_capacity(ODD);
    data.extend((0..ODD).map(|i| (i % 251) as u8));
    let ptr = data.as_ptr() as usize;
    assert_eq!(ptr % 8, 1, "the test allocator misaligns this size");
    assert!(!interop::is_adoptable(&data));
    let expect = data.clone();
    WATCH.store(ptr, SeqCst);
    FREES.store(0, SeqCst);
    let a = interop::adopt_vec(&cpu, data, &[ODD])?;
    let frees = FREES.load(SeqCst);
    WATCH.store(0, SeqCst);
    assert_eq!(frees, 1, "the original is freed once the copy is made");
    let at = interop::view(&a, |x| x.as_ptr() as usize)?;
    assert_ne!(at, ptr);
    assert_eq!(at % gpubuf::cpu::ALIGN, 0);
    assert_eq!(a.to_vec()?, expect);
    Ok(())
}

/// The CPU user kernel: a 5-point stencil over rayon, reading one array's view and writing
/// another's, checked against a serial loop.
#[test]
fn a_rayon_stencil_over_views() -> Result<()> {
    let cpu = cpu();
    let (n, m) = (37, 23);
    let src: Vec<f32> = (0..n * m).map(|k| ((k * 7919) % 101) as f32).collect();
    let a = NDBuffer::from_slice(&cpu, &[n, m], &src)?;
    let out = NDBuffer::<_, f32>::zeros(&cpu, &[n, m])?;
    let inner = out.slice(&[1..n - 1, 1..m - 1])?;
    interop::view(&a, |x| {
        interop::view_mut(&inner, |o| {
            interop::par_chunks_mut(o, 0, 4, |first, mut rows| {
                for ((i, j), v) in rows.indexed_iter_mut().map(|(ix, v)| ((ix[0], ix[1]), v)) {
                    let (i, j) = (first + i + 1, j + 1);
                    *v = x[[i, j]] - 0.25 * (x[[i - 1, j]] + x[[i + 1, j]] + x[[i, j - 1]] + x[[i, j + 1]]);
                }
            })
        })
    })???;
    let got = out.to_vec()?;
    for i in 0..n {
        for j in 0..m {
            let at = |i: usize, j: usize| src[i * m + j];
            let want = if i == 0 || j == 0 || i == n - 1 || j == m - 1 {
                0.0
            } else {
                at(i, j) - 0.25 * (at(i - 1, j) + at(i + 1, j) + at(i, j - 1) + at(i, j + 1))
            };
            assert_eq!(got[i * m + j], want, "({i}, {j})");
        }
    }
    assert!(interop::view_mut(&out, |o| interop::par_chunks_mut(o, 2, 1, |_, _| ()))?.is_err());
    Ok(())
}

/// The device address of a CUDA view: base, plus the buffer's byte offset, plus the
/// layout's element offset.
#[cfg(feature = "cuda")]
#[test]
fn a_cuda_view_pointer_applies_both_offsets() {
    gpubuf_testkit::run_cuda(|cu| {
        let whole = gpubuf::Buffer::zeros(cu, 1024)?;
        let base = whole.memory().device_ptr();
        let b = NDBuffer::<_, f64>::from_buffer(whole.slice(512..1024)?, &[8, 8], gpubuf::Order::C)?;
        let v = b.slice(&[2..4, 3..8])?;
        assert_eq!(gpubuf::cuda::interop::view_ptr(&v)?, base + 512 + 8 * (2 * 8 + 3));
        Ok(())
    });
}
