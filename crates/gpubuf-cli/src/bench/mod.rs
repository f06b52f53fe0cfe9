//! The `gpubuf bench` frame: timing, progress bars, the report (table, JSON, a chart).

mod bufferizer;
mod copy;
mod demo;
mod halo;
mod mirror;
#[cfg(feature = "mpi")]
mod mpi;
mod pool;

use crate::plot;
pub use crate::report::{gbps, median_secs, progress, Entry, Report};
use gpubuf::{with_backend, BackendKind, BackendVisitor, Error, Kernels, Result};
use std::path::PathBuf;

/// Command-line options shared by all benchmarks.
pub struct Options {
    /// Timed repetitions per case.
    pub reps: usize,
    /// Smaller sizes.
    pub quick: bool,
    /// JSON on stdout.
    pub json: bool,
    /// Chart path (`.png` or `.svg`).
    pub plot: Option<PathBuf>,
    /// Also measure with warm caches (`gpubuf bench halo`: nothing evicted between runs).
    pub warm: bool,
}

const BENCHES: [(&str, &str); 7] = [
    (
        "copy",
        "copy-plan gather (contiguous, transpose, halo strips, reversed+negated) vs a plain device copy of the same bytes",
    ),
    ("pool", "memory pool hit path vs the raw allocator, a mixed 64-buffer workload, two threads"),
    ("bufferizer", "bufferizer appends (64 B and 4.9 MB frames, from device and host) vs a plain copy"),
    ("mirror", "mirror sync after 102 sparse writes into 64 MiB: exact ranges vs glumpy's hull vs a full upload"),
    ("halo", "halo pack/unpack of NDSL-sized exchanges (c192 rotated and vector, c48 x30) vs a device copy"),
    ("demo", "the demo's steps/s at 256^2 and 1024^2 vs the CPU backend, host bytes per step, checksums compared"),
    ("mpi", "halo updates across ranks (mpirun -n 6 or -n 4; feature mpi) vs a raw MPI exchange of the same bytes"),
];

/// The benchmark names as the command line's parser takes them: any other name is a usage
/// error.
pub fn names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(BENCHES.map(|(n, _)| n))
}

/// The benchmark list, as `gpubuf bench --list` and `gpubuf bench --help` print it.
pub fn help() -> String {
    let mut s = String::from(
        "Benchmarks (gpubuf bench <name> [--backend cpu|opencl|cuda] [--json] [--plot FILE.png]):\n",
    );
    for (n, d) in BENCHES {
        s.push_str(&format!("  {n:<10} {d}\n"));
    }
    s.push_str("Figures and what each case measures: docs/benchmarks.md");
    s
}

/// Prints the benchmark names.
///
/// # Errors
/// As [`crate::output::write_stdout`].
pub fn list() -> Result<()> {
    crate::output::write_stdout(&(help() + "\n"))
}

struct Runner<'a> {
    name: &'a str,
    opts: &'a Options,
}

impl BackendVisitor for Runner<'_> {
    type Output = Report;
    fn visit<B: Kernels>(self, b: B) -> Result<Report> {
        let results = match self.name {
            "copy" => copy::run(&b, self.opts)?,
            "pool" => pool::run(&b, self.opts)?,
            "bufferizer" => bufferizer::run(&b, self.opts)?,
            "mirror" => mirror::run(&b, self.opts)?,
            "halo" => halo::run(&b, self.opts)?,
            "demo" => demo::run(&b, self.opts)?,
            other => {
                return Err(Error::invalid(format!("unknown benchmark {other:?}; see `gpubuf bench --list`")))
            }
        };
        Ok(Report { bench: self.name.into(), backend: B::KIND.name().into(), device: b.info().name, results })
    }
}

/// Runs benchmark `name` on `kind` and prints the report.
///
/// # Errors
/// Unknown benchmark, unavailable backend, or a failure while measuring.
pub fn run(name: &str, kind: BackendKind, opts: &Options) -> Result<()> {
    if name == "mpi" {
        #[cfg(feature = "mpi")]
        return mpi::run(kind, opts);
        #[cfg(not(feature = "mpi"))]
        return Err(Error::invalid(
            "gpubuf bench mpi needs the mpi feature: cargo build --release -p gpubuf-cli --features mpi",
        ));
    }
    let report = with_backend(kind, Runner { name, opts })?;
    emit(&report, opts)
}

/// Prints `report` (table or JSON) and writes its plot when asked.
///
/// # Errors
/// JSON and plot write errors.
pub(crate) fn emit(report: &Report, opts: &Options) -> Result<()> {
    let text = if opts.json {
        serde_json::to_string(report).map_err(|e| Error::invalid(e.to_string()))? + "\n"
    } else {
        table(report)
    };
    crate::output::write_stdout(&text)?;
    if let Some(path) = &opts.plot {
        plot::write_report(report, path)?;
        eprintln!("plot written to {}", path.display());
    }
    Ok(())
}

fn table(r: &Report) -> String {
    let mut s = format!("bench {} on {} ({})\n", r.bench, r.backend, r.device);
    s += &format!("{:<32} {:>12} {:<6} {:>12} {:>8}\n", "case", "value", "unit", "baseline", "ratio");
    for e in &r.results {
        let base = e.baseline.map_or(String::from("-"), |b| format!("{b:.3}"));
        let ratio = e.ratio.map_or(String::from("-"), |x| format!("{x:.3}"));
        s += &format!("{:<32} {:>12.3} {:<6} {:>12} {:>8}\n", e.name, e.value, e.unit, base, ratio);
    }
    s
}
