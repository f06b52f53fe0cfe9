//! `gpubuf info`.

use gpubuf::{status, BackendStatus, DeviceInfo, Error, Result};
use serde_json::json;

/// A device's description, or why the driver could not describe it.
type Entry = std::result::Result<DeviceInfo, Error>;

/// The devices of a backend that runs here, one entry each. CUDA lists every ordinal with
/// its own error, so one device that fails does not hide the others.
fn entries(s: &BackendStatus, devices: &[DeviceInfo]) -> Vec<Entry> {
    #[cfg(feature = "cuda")]
    if s.kind == gpubuf::BackendKind::Cuda {
        if let Ok(list) = gpubuf::cuda::device_list() {
            return list.into_iter().map(|(_, d)| d).collect();
        }
    }
    let _ = s;
    devices.iter().cloned().map(Ok).collect()
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Why a backend cannot be used, without repeating that it is unavailable.
fn reason(e: &Error) -> String {
    match e {
        Error::BackendUnavailable { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// Appends one formatted line to a `String` (writing to a `String` cannot fail).
macro_rules! push_line {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// Prints every backend's status.
pub fn run(as_json: bool) -> Result<()> {
    let all = status();
    if as_json {
        let v: Vec<_> = all
            .iter()
            .map(|s| {
                let (available, reason, devices) = match &s.devices {
                    Ok(d) => (true, None, entries(s, d)),
                    Err(e) => (false, Some(e.to_string()), Vec::new()),
                };
                json!({
                    "backend": s.kind.name(),
                    "compiled": s.compiled,
                    "available": available,
                    "reason": reason,
                    "devices": devices.iter().enumerate().map(|(i, d)| match d {
                        Ok(d) => json!({
                            "index": i, "name": d.name, "vendor": d.vendor, "version": d.version,
                            "total_memory": d.total_memory, "compute_units": d.compute_units,
                        }),
                        Err(e) => json!({ "index": i, "error": e.to_string() }),
                    }).collect::<Vec<_>>(),
                })
            })
            .collect();
        let mut text = serde_json::to_string_pretty(&v).unwrap_or_default();
        text.push('\n');
        return crate::output::write_stdout(&text);
    }
    let mut out = String::new();
    for s in &all {
        match &s.devices {
            Ok(devices) => {
                let devices = entries(s, devices);
                push_line!(out, "{:<7} compiled in, available, {} device(s)", s.kind.name(), devices.len());
                for (i, d) in devices.iter().enumerate() {
                    match d {
                        Ok(d) => push_line!(
                            out,
                            "          [{i}] {} ({}), {}, {} compute units, {}",
                            d.name,
                            d.vendor,
                            gib(d.total_memory),
                            d.compute_units,
                            d.version
                        ),
                        Err(e) => push_line!(out, "          [{i}] unavailable: {}", reason(e)),
                    }
                }
            }
            Err(e) if s.compiled => {
                push_line!(out, "{:<7} compiled in, unavailable: {}", s.kind.name(), reason(e))
            }
            Err(_) => {
                push_line!(
                    out,
                    "{:<7} not compiled in (build with `--features {}`)",
                    s.kind.name(),
                    s.kind.name()
                )
            }
        }
    }
    crate::output::write_stdout(&out)
}
