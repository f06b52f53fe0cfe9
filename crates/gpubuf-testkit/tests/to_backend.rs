//! `to_backend` to the device an array is already on is no copy, also when the array is
//! typed by a run-time `gpubuf::Device` and the target is the concrete backend it holds (or
//! the converse): writes through one handle are read through the other, plain and pooled.
//! A target of another device still copies.

use gpubuf::{Device, Kernels, MemoryPool, NDBuffer, Result};

/// `u` (on a `Device`) and `c` (the same array on `concrete`) share their storage: a write
/// through either is seen through the other.
fn shared_both_ways<C: Kernels>(u: &NDBuffer<Device, f64>, c: &NDBuffer<C, f64>) -> Result<()> {
    assert!(u.buffer().shares_memory(c.buffer()));
    assert!(c.buffer().shares_memory(u.buffer()));
    assert_eq!(c.shape(), u.shape());
    c.set(&[1, 2], 42.0)?;
    assert_eq!(u.get(&[1, 2])?, 42.0);
    u.set(&[0, 0], -1.0)?;
    assert_eq!(c.get(&[0, 0])?, -1.0);
    // And back: the concrete array on the device is the same storage again.
    let back = c.to_backend(u.backend())?;
    assert!(back.buffer().shares_memory(u.buffer()));
    back.set(&[2, 3], 7.0)?;
    assert_eq!(u.get(&[2, 3])?, 7.0);
    Ok(())
}

/// Plain and pooled arrays of `device`, whose backend is `concrete`.
fn no_copy_on_own_backend<C: Kernels>(device: &Device, concrete: &C) -> Result<()> {
    let data: Vec<f64> = (0..12).map(f64::from).collect();
    let plain = NDBuffer::<Device, f64>::from_slice(device, &[3, 4], &data)?;
    shared_both_ways(&plain, &plain.to_backend(concrete)?)?;
    // An empty view shares no byte, wherever it points (numpy's shares_memory agrees).
    let empty = plain.buffer().slice(8..8)?;
    assert!(!empty.shares_memory(plain.buffer()) && !plain.buffer().shares_memory(&empty));
    assert!(plain.buffer().slice(8..9)?.shares_memory(plain.buffer()));

    let pool = MemoryPool::new(device.clone());
    let pooled: NDBuffer<Device, f64> = pool.from_slice(device, &[3, 4], &data)?;
    let neighbour: NDBuffer<Device, f64> = pool.zeros(device, &[3, 4])?;
    let c = pooled.to_backend(concrete)?;
    shared_both_ways(&pooled, &c)?;
    assert!(!c.buffer().shares_memory(neighbour.buffer()), "a pooled neighbour is not the same block");
    assert!(neighbour.all_equal(0.0)?);
    // The pool block stays leased while the converted view lives.
    drop(pooled);
    let again: NDBuffer<Device, f64> = pool.zeros(device, &[3, 4])?;
    assert!(!again.buffer().shares_memory(c.buffer()));
    assert_eq!(c.get(&[1, 2])?, 42.0);
    Ok(())
}

#[test]
fn cpu_device_to_its_cpu_backend_is_no_copy() -> Result<()> {
    let device = Device::from(gpubuf_testkit::cpu());
    let concrete = device.as_cpu().expect("a cpu device").clone();
    no_copy_on_own_backend(&device, &concrete)
}

#[cfg(feature = "opencl")]
#[test]
fn opencl_device_to_its_opencl_backend_is_no_copy() -> Result<()> {
    let Some(cl) = gpubuf_testkit::opencl() else { return Ok(()) };
    let device = Device::from(cl);
    let concrete = device.as_opencl().expect("an opencl device").clone();
    no_copy_on_own_backend(&device, &concrete)
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_device_to_its_cuda_backend_is_no_copy() -> Result<()> {
    let Some(cu) = gpubuf_testkit::cuda() else { return Ok(()) };
    let device = Device::from(cu);
    let concrete = device.as_cuda().expect("a cuda device").clone();
    no_copy_on_own_backend(&device, &concrete)
}

/// Another device (or another backend) is a copy: writes to it do not reach the source.
#[cfg(feature = "opencl")]
#[test]
fn another_device_is_a_copy() -> Result<()> {
    let Some(cl) = gpubuf_testkit::opencl() else { return Ok(()) };
    let device = Device::from(gpubuf_testkit::cpu());
    let u = NDBuffer::<Device, f64>::from_slice(&device, &[2], &[1.0, 2.0])?;
    let on_cl = u.to_backend(&cl)?;
    on_cl.set(&[0], 9.0)?;
    assert_eq!(u.to_vec()?, [1.0, 2.0]);
    let on_cl_device = u.to_backend(&Device::from(cl.clone()))?;
    assert!(!on_cl_device.buffer().shares_memory(u.buffer()));
    assert_eq!(on_cl_device.backend().kind(), gpubuf::BackendKind::OpenCl);
    // A concrete backend of another kind than the device's: a copy too.
    let from_cl = on_cl.to_backend(&device)?;
    assert_eq!(from_cl.to_vec()?, [9.0, 2.0]);
    assert!(!from_cl.buffer().shares_memory(u.buffer()));
    Ok(())
}
