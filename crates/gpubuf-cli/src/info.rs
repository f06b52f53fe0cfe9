//! `gpubuf info`.

use gpubuf::{status, Error, Result};
use serde_json::json;

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

/// Prints every backend's status.
pub fn run(as_json: bool) -> Result<()> {
    let all = status();
    if as_json {
        let v: Vec<_> = all
            .iter()
            .map(|s| {
                let (available, reason, devices) = match &s.devices {
                    Ok(d) => (true, None, d.clone()),
                    Err(e) => (false, Some(e.to_string()), Vec::new()),
                };
                json!({
                    "backend": s.kind.name(),
                    "compiled": s.compiled,
                    "available": available,
                    "reason": reason,
                    "devices": devices.iter().map(|d| json!({
                        "name": d.name, "vendor": d.vendor, "version": d.version,
                        "total_memory": d.total_memory, "compute_units": d.compute_units,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    for s in &all {
        match &s.devices {
            Ok(devices) => {
                println!("{:<7} compiled in, available, {} device(s)", s.kind.name(), devices.len());
                for (i, d) in devices.iter().enumerate() {
                    println!(
                        "          [{i}] {} ({}), {}, {} compute units, {}",
                        d.name,
                        d.vendor,
                        gib(d.total_memory),
                        d.compute_units,
                        d.version
                    );
                }
            }
            Err(e) if s.compiled => println!("{:<7} compiled in, unavailable: {}", s.kind.name(), reason(e)),
            Err(_) => {
                println!("{:<7} not compiled in (build with `--features {}`)", s.kind.name(), s.kind.name())
            }
        }
    }
    Ok(())
}
