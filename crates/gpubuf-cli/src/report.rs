//! What a measurement produces and how it is taken, shared by `bench`, `plot` and `demo`:
//! the figures ([`Entry`], [`Report`]: the JSON of `--json`), progress bars, and the
//! median of timed runs.

use gpubuf::Result;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::time::Instant;

/// One measured figure. `baseline` is the comparison measured in the same run and `ratio`
/// is `value / baseline` (higher is better for throughputs).
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Case name, `<case>/<metric>`.
    pub name: String,
    /// The figure.
    pub value: f64,
    /// Its unit.
    pub unit: String,
    /// The baseline figure, in the same unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    /// `value / baseline`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
}

impl Entry {
    /// A figure compared against a baseline.
    pub fn versus(name: impl Into<String>, value: f64, unit: &str, baseline: f64) -> Self {
        let ratio = if baseline > 0.0 { Some(value / baseline) } else { None };
        Entry { name: name.into(), value, unit: unit.into(), baseline: Some(baseline), ratio }
    }
}

/// A whole benchmark run: the JSON shape of `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Benchmark name.
    pub bench: String,
    /// Backend name.
    pub backend: String,
    /// Device name.
    pub device: String,
    /// Figures.
    pub results: Vec<Entry>,
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg:<28} [{bar:30}] {pos}/{len} {elapsed}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

/// Median seconds of `reps` runs of `f` after two warm-up runs; `f` must include the
/// synchronisation that makes its work complete.
///
/// # Errors
/// The first error `f` returns.
pub fn median_secs(reps: usize, pb: &ProgressBar, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64());
        pb.inc(1);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}

/// GB/s for `bytes` moved in `secs`.
pub fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}
