//! Finding the CUDA driver, NVRTC and devices without ever letting cudarc panic.

use crate::error::{driver, unavailable};
use cudarc::driver::sys::{CUdevice_attribute, CUresult};
use cudarc::driver::{result, CudaContext};
use gpubuf_core::{BackendKind, DeviceInfo, Result};

/// Environment variable selecting the CUDA device by ordinal (default 0).
pub const DEVICE_ENV: &str = "GPUBUF_CUDA_DEVICE";

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
    match result::init() {
        Ok(()) => Ok(()),
        Err(e) if e.0 == CUresult::CUDA_ERROR_NO_DEVICE => {
            Err(unavailable("the CUDA driver found no device"))
        }
        Err(e) => Err(unavailable(format!("cuInit failed: {}", driver(e, "cuInit")))),
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

/// Every CUDA device.
///
/// # Errors
/// [`gpubuf_core::Error::BackendUnavailable`] without a driver or device; driver errors.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    driver_available()?;
    let n = CudaContext::device_count().map_err(|e| driver(e, "cuDeviceGetCount"))?;
    if n <= 0 {
        return Err(unavailable("the CUDA driver found no device"));
    }
    (0..n as usize).map(device_info).collect()
}

/// Describes device `ordinal` (creates, or retains, its primary context).
pub(crate) fn device_info(ordinal: usize) -> Result<DeviceInfo> {
    let ctx = CudaContext::new(ordinal).map_err(|e| driver(e, "cuDevicePrimaryCtxRetain"))?;
    info_of(&ctx)
}

pub(crate) fn info_of(ctx: &CudaContext) -> Result<DeviceInfo> {
    let (major, minor) = ctx.compute_capability().map_err(|e| driver(e, "compute capability"))?;
    let sms = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(|e| driver(e, "SM count"))?;
    Ok(DeviceInfo {
        backend: BackendKind::Cuda,
        name: ctx.name().map_err(|e| driver(e, "device name"))?,
        vendor: "NVIDIA".into(),
        version: format!("compute capability {major}.{minor}"),
        total_memory: ctx.total_mem().map_err(|e| driver(e, "total memory"))? as u64,
        compute_units: sms as u32,
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
