//! Finding the CUDA driver, NVRTC and devices without ever letting cudarc panic.

use crate::error::{driver, text, unavailable};
use cudarc::driver::result;
use cudarc::driver::sys::{CUdevice, CUdevice_attribute, CUresult};
use gpubuf_core::{BackendKind, DeviceInfo, Error, Result};
use std::ffi::c_int;

/// Environment variable selecting the CUDA device by ordinal (default 0).
pub const DEVICE_ENV: &str = "GPUBUF_CUDA_DEVICE";

/// The fork generation the driver was first initialised in.
static FIRST_INIT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Checks that libcuda can be loaded and initialised, before any other cudarc call
/// (cudarc panics when a library it needs is missing).
///
/// # Errors
/// [`gpubuf_core::Error::BackendUnavailable`] with the reason.
pub fn driver_available() -> Result<()> {
    // SAFETY: only tries to dlopen the library under its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(unavailable("the CUDA driver library (libcuda.so) is not installed"));
    }
    // The driver's state is made once a process: a child forked after that inherits it
    // unusable, so it is refused before it calls the driver (`gpubuf_core::process`).
    if let Some(&first) = FIRST_INIT.get() {
        gpubuf_core::process::check_same_process(BackendKind::Cuda, first)?;
    }
    match result::init() {
        Ok(()) => {
            FIRST_INIT.get_or_init(gpubuf_core::process::generation);
            Ok(())
        }
        Err(e) if e.0 == CUresult::CUDA_ERROR_NO_DEVICE => {
            Err(unavailable("the CUDA driver found no device"))
        }
        Err(e) => Err(unavailable(format!("cuInit failed ({:?}): {}", e.0, text(e)))),
    }
}

/// Checks that NVRTC (libnvrtc.so) can be loaded; kernels are compiled with it.
///
/// # Errors
/// [`gpubuf_core::Error::BackendUnavailable`] with the reason.
pub fn nvrtc_available() -> Result<()> {
    // SAFETY: only tries to dlopen the library under its usual names.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(unavailable(
            "NVRTC (libnvrtc.so) is not installed; `pip install nvidia-cuda-nvrtc-cu12` ships it (add its lib folder to LD_LIBRARY_PATH)",
        ))
    }
}

/// Every CUDA device, by ordinal, described from the driver's device queries
/// (`cuDeviceGet*`, `cuDeviceTotalMem`): no context is created, so listing is quick and a
/// device in exclusive-process mode that another process holds is listed too.
///
/// A device the driver cannot describe stays in the list at its ordinal (so indices are
/// ordinals, as [`DEVICE_ENV`] takes them), with its name saying why, zero memory and zero
/// compute units; [`device_list`] gives the error itself.
///
/// # Errors
/// [`gpubuf_core::Error::BackendUnavailable`] without a driver or device; the driver's error
/// when it cannot count its devices.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    Ok(device_list()?
        .into_iter()
        .map(|(ordinal, info)| info.unwrap_or_else(|e| placeholder(ordinal, &e)))
        .collect())
}

/// The line of a device the driver could not describe.
fn placeholder(ordinal: usize, e: &Error) -> DeviceInfo {
    DeviceInfo {
        backend: BackendKind::Cuda,
        name: format!("CUDA device {ordinal} (unavailable: {e})"),
        vendor: "NVIDIA".into(),
        version: String::new(),
        total_memory: 0,
        compute_units: 0,
    }
}

/// Every CUDA device's ordinal with its description or the error of describing it: one
/// device failing does not hide the others. No context is created.
///
/// # Errors
/// [`gpubuf_core::Error::BackendUnavailable`] without a driver or device; the driver's error
/// when it cannot count its devices.
pub fn device_list() -> Result<Vec<(usize, Result<DeviceInfo>)>> {
    driver_available()?;
    let n = result::device::get_count().map_err(|e| driver(e, "cuDeviceGetCount"))?;
    if n <= 0 {
        return Err(unavailable("the CUDA driver found no device"));
    }
    Ok((0..n as usize).map(|i| (i, device_info(i))).collect())
}

/// A device's handle for the device queries.
fn device(ordinal: usize) -> Result<CUdevice> {
    let i = c_int::try_from(ordinal).map_err(|_| Error::invalid(format!("device ordinal {ordinal}")))?;
    result::device::get(i).map_err(|e| driver(e, "cuDeviceGet"))
}

/// An attribute of a device.
pub(crate) fn attribute(dev: CUdevice, a: CUdevice_attribute, what: &str) -> Result<i32> {
    // SAFETY: `dev` came from `cuDeviceGet`; the query reads one integer.
    unsafe { result::device::get_attribute(dev, a) }.map_err(|e| driver(e, what))
}

/// The device's name (`cuDeviceGetName`), read into a buffer that always ends in NUL.
fn name(dev: CUdevice) -> Result<String> {
    let mut buf = [0u8; 256];
    // One byte short of the buffer: the last byte stays NUL whatever the driver writes.
    let len = c_int::try_from(buf.len() - 1).unwrap_or(c_int::MAX);
    // SAFETY: `buf` is a live buffer of more than `len` bytes; `dev` came from `cuDeviceGet`.
    unsafe { cudarc::driver::sys::cuDeviceGetName(buf.as_mut_ptr().cast(), len, dev) }
        .result()
        .map_err(|e| driver(e, "cuDeviceGetName"))?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Describes device `ordinal` from the device queries (`cuInit` must have succeeded; no
/// context is created).
pub(crate) fn device_info(ordinal: usize) -> Result<DeviceInfo> {
    let dev = device(ordinal)?;
    let major = attribute(
        dev,
        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        "compute capability",
    )?;
    let minor = attribute(
        dev,
        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        "compute capability",
    )?;
    let sms = attribute(dev, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count")?;
    // SAFETY: `dev` came from `cuDeviceGet`; the query reads one size.
    let total = unsafe { result::device::total_mem(dev) }.map_err(|e| driver(e, "cuDeviceTotalMem"))?;
    Ok(DeviceInfo {
        backend: BackendKind::Cuda,
        name: name(dev)?,
        vendor: "NVIDIA".into(),
        version: format!("compute capability {major}.{minor}"),
        total_memory: total as u64,
        compute_units: u32::try_from(sms).unwrap_or(0),
    })
}

/// The ordinal named by [`DEVICE_ENV`], or 0.
///
/// # Errors
/// [`gpubuf_core::Error::BackendUnavailable`] for a value that is no device ordinal.
pub(crate) fn selected_ordinal(count: usize) -> Result<usize> {
    match std::env::var(DEVICE_ENV) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
            Ok(i) if i < count => Ok(i),
            _ => Err(unavailable(format!("{DEVICE_ENV}={v} is not a device ordinal below {count}"))),
        },
        _ => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_that_fails_keeps_its_line_with_the_reason() {
        let e = Error::Driver {
            backend: BackendKind::Cuda,
            code: 999,
            message: "cuDeviceGetName: unknown".into(),
        };
        let d = placeholder(3, &e);
        assert_eq!(d.name, format!("CUDA device 3 (unavailable: {e})"));
        assert!(d.name.contains("cuDeviceGetName: unknown"), "{}", d.name);
        assert_eq!((d.total_memory, d.compute_units), (0, 0), "never chosen for its size");
    }
}
