//! A dependency-free SVG bar chart of a benchmark report: each case's value beside its
//! baseline, scaled per unit.

use crate::bench::Report;
use gpubuf::{Error, Result};
use std::fmt::Write as _;
use std::path::Path;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Renders `report` as SVG text.
pub fn svg(report: &Report) -> String {
    let row = 34.0;
    let (left, width) = (260.0, 460.0);
    let height = 70.0 + row * report.results.len() as f64;
    let max = report
        .results
        .iter()
        .map(|e| e.value.max(e.baseline.unwrap_or(0.0)))
        .fold(0.0f64, f64::max)
        .max(1e-12);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="sans-serif" font-size="12">"#,
        w = left + width + 140.0
    );
    let _ = write!(s, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    let _ = write!(
        s,
        r#"<text x="10" y="22" font-size="15">gpubuf bench {} — {} ({})</text>"#,
        escape(&report.bench),
        escape(&report.backend),
        escape(&report.device)
    );
    let _ = write!(
        s,
        r##"<rect x="{left}" y="32" width="12" height="10" fill="#3b6fb6"/><text x="{}" y="41">measured</text><rect x="{}" y="32" width="12" height="10" fill="#b0b0b0"/><text x="{}" y="41">baseline</text>"##,
        left + 16.0,
        left + 90.0,
        left + 106.0
    );
    for (i, e) in report.results.iter().enumerate() {
        let y = 56.0 + row * i as f64;
        let _ = write!(s, r#"<text x="10" y="{}">{}</text>"#, y + 14.0, escape(&e.name));
        let wv = width * e.value / max;
        let _ = write!(s, r##"<rect x="{left}" y="{y}" width="{wv:.1}" height="12" fill="#3b6fb6"/>"##);
        let label = match e.ratio {
            Some(r) => format!("{:.2} {} (x{:.2})", e.value, e.unit, r),
            None => format!("{:.2} {}", e.value, e.unit),
        };
        let _ = write!(s, r#"<text x="{:.1}" y="{}">{}</text>"#, left + wv + 4.0, y + 11.0, escape(&label));
        if let Some(b) = e.baseline {
            let wb = width * b / max;
            let _ = write!(
                s,
                r##"<rect x="{left}" y="{}" width="{wb:.1}" height="8" fill="#b0b0b0"/>"##,
                y + 14.0
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

/// Writes the SVG chart to `path` (which must end in `.svg`).
///
/// # Errors
/// [`Error::InvalidArgument`] for another extension or an I/O failure.
pub fn write_svg(report: &Report, path: &Path) -> Result<()> {
    if path.extension().and_then(|e| e.to_str()) != Some("svg") {
        return Err(Error::invalid(format!("--plot writes SVG; give a .svg path, not {}", path.display())));
    }
    std::fs::write(path, svg(report)).map_err(|e| Error::invalid(format!("writing {}: {e}", path.display())))
}
