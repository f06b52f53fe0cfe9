//! Platform and device discovery, and picking one with `GPUBUF_OPENCL_DEVICE`.

use crate::error::{cl, unavailable, PLATFORM_NOT_FOUND};
use gpubuf_core::{BackendKind, DeviceInfo, Result};
use opencl3::device::{Device, CL_DEVICE_TYPE_ALL};
use opencl3::platform::get_platforms;

/// Environment variable selecting the OpenCL device: a flat index (`1`), a
/// `platform:device` pair (`0:1`), or a case-insensitive substring of the device or
/// platform name (`pthread`, `nvidia`).
pub const DEVICE_ENV: &str = "GPUBUF_OPENCL_DEVICE";

/// One OpenCL device found on this machine.
#[derive(Debug, Clone)]
pub struct ClDeviceEntry {
    /// Index of the platform in `clGetPlatformIDs` order.
    pub platform_index: usize,
    /// Index of the device within its platform.
    pub device_index: usize,
    /// Platform name.
    pub platform: String,
    /// What the device says about itself.
    pub info: DeviceInfo,
    pub(crate) device: Device,
}

/// Checks that an OpenCL runtime (ICD loader) can be loaded.
///
/// # Errors
/// [`gpubuf_core::Error::BackendUnavailable`] with the reason.
pub fn runtime_available() -> Result<()> {
    if cl3::is_opencl_runtime_available() {
        Ok(())
    } else {
        Err(unavailable(
            "no OpenCL runtime (libOpenCL.so) could be loaded; on Debian: apt-get install ocl-icd-opencl-dev pocl-opencl-icd",
        ))
    }
}

/// The fork generation of this process's first platform scan (`gpubuf_core::process`).
static FIRST_SCAN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Every OpenCL device of every platform.
///
/// # Errors
/// [`gpubuf_core::Error::BackendUnavailable`] without a runtime or platform; driver errors.
pub fn devices() -> Result<Vec<ClDeviceEntry>> {
    scan().map(|(found, _)| found)
}

/// Every device of every platform, and what went wrong on the platforms that gave none
/// (named in the error of a device choice that matches nothing).
fn scan() -> Result<(Vec<ClDeviceEntry>, Vec<String>)> {
    runtime_available()?;
    // The driver's state is made once a process; a child forked after that inherits it
    // without its threads, and its first call can hang.
    let first = *FIRST_SCAN.get_or_init(gpubuf_core::process::generation);
    gpubuf_core::process::check_same_process(gpubuf_core::BackendKind::OpenCl, first)?;
    let platforms = match get_platforms() {
        Ok(p) => p,
        Err(e) if e.0 == PLATFORM_NOT_FOUND => {
            return Err(unavailable("the OpenCL loader found no platform (no ICD installed)"))
        }
        Err(e) => return Err(cl(e, "clGetPlatformIDs")),
    };
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (pi, p) in platforms.iter().enumerate() {
        let pname = p.name().unwrap_or_default();
        let ids = match p.get_devices(CL_DEVICE_TYPE_ALL) {
            Ok(ids) => ids,
            Err(e) => {
                problems.push(format!("platform {pi} ({}): clGetDeviceIDs failed: {e}", pname.trim()));
                continue;
            }
        };
        for (di, id) in ids.into_iter().enumerate() {
            let device = Device::new(id);
            let info = DeviceInfo {
                backend: BackendKind::OpenCl,
                name: device.name().map_err(|e| cl(e, "CL_DEVICE_NAME"))?.trim().to_string(),
                vendor: pname.trim().to_string(),
                version: format!(
                    "{} (driver {})",
                    device.version().unwrap_or_default().trim(),
                    device.driver_version().unwrap_or_default().trim()
                ),
                total_memory: device.global_mem_size().unwrap_or(0),
                compute_units: device.max_compute_units().unwrap_or(0),
            };
            out.push(ClDeviceEntry {
                platform_index: pi,
                device_index: di,
                platform: pname.clone(),
                info,
                device,
            });
        }
    }
    if out.is_empty() {
        let why = if problems.is_empty() { String::new() } else { format!(" ({})", problems.join("; ")) };
        return Err(unavailable(format!("no OpenCL device on any platform{why}")));
    }
    Ok((out, problems))
}

/// The device named by [`DEVICE_ENV`], or the first one.
///
/// # Errors
/// [`gpubuf_core::Error::BackendUnavailable`] when no device matches.
pub(crate) fn select() -> Result<ClDeviceEntry> {
    let (all, problems) = scan()?;
    let wanted = std::env::var(DEVICE_ENV).ok().filter(|s| !s.trim().is_empty());
    let Some(w) = wanted else {
        return Ok(all[0].clone());
    };
    let w = w.trim().to_lowercase();
    let hit = if let Ok(i) = w.parse::<usize>() {
        all.get(i).cloned()
    } else if let Some((p, d)) =
        w.split_once(':').and_then(|(p, d)| Some((p.parse::<usize>().ok()?, d.parse::<usize>().ok()?)))
    {
        all.iter().find(|e| e.platform_index == p && e.device_index == d).cloned()
    } else {
        all.iter()
            .find(|e| e.info.name.to_lowercase().contains(&w) || e.platform.to_lowercase().contains(&w))
            .cloned()
    };
    hit.ok_or_else(|| {
        let names: Vec<String> = all
            .iter()
            .enumerate()
            .map(|(i, e)| format!("{i} ({}:{}) {}", e.platform_index, e.device_index, e.info.name))
            .collect();
        let problems = if problems.is_empty() {
            String::new()
        } else {
            format!("; without devices: {}", problems.join("; "))
        };
        unavailable(format!("{DEVICE_ENV}={w} matches no device; devices: {}{problems}", names.join(", ")))
    })
}
