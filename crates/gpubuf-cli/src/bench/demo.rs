//! `gpubuf bench demo`: the heat-diffusion demo's steps/s on a backend against the CPU
//! backend, measured in the same process, and the bytes that cross between host and
//! device per step; the two fields must be bit-for-bit equal.

use super::{progress, Entry, Options};
use crate::demo::{checksum, simulate, DemoOptions, Outcome, SelfExchange};
use gpubuf::cpu::CpuBackend;
use gpubuf::{Error, Kernels, Result};

/// Grid sizes measured, with the steps of a run (full and `--quick`).
const CASES: [(usize, usize, usize); 2] = [(256, 400, 40), (1024, 40, 8)];

/// Most timed runs per case and backend (the median is reported): the runs are long
/// enough that `--reps` of them would take minutes.
const MAX_RUNS: usize = 5;

/// One run of the demo in this process on `b`.
fn once<B: Kernels>(b: &B, opts: &DemoOptions) -> Result<Outcome> {
    simulate(b, opts, 0, (1, 1), |r| r, |b, pool, spec| SelfExchange::new(b, pool, spec))
}

/// The median steps/s of `runs` runs; the field and host bytes of the last.
fn measure<B: Kernels>(
    b: &B,
    opts: &DemoOptions,
    runs: usize,
    pb: &indicatif::ProgressBar,
) -> Result<(f64, Vec<f64>, u64)> {
    let mut rates = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs.max(1) {
        let out = once(b, opts)?;
        rates.push(opts.steps as f64 / out.secs.max(1e-9));
        last = Some(out);
        pb.inc(1);
    }
    rates.sort_by(|x, y| x.total_cmp(y));
    let rate = rates[rates.len() / 2];
    let out = last.ok_or_else(|| Error::invalid("no run"))?;
    let field = out.global.ok_or_else(|| Error::invalid("a one-rank run returns its field"))?;
    Ok((rate, field, out.host_bytes))
}

/// Runs the demo benchmark on `b`, with the CPU backend as the baseline.
///
/// # Errors
/// Backend and component errors; [`Error::InvalidArgument`] when the backend's field
/// differs from the CPU's.
pub fn run<B: Kernels>(b: &B, opts: &Options) -> Result<Vec<Entry>> {
    let cpu = CpuBackend::new();
    let runs = opts.reps.clamp(1, MAX_RUNS);
    let pb = progress((2 * runs * CASES.len()) as u64, "demo");
    let mut out = Vec::new();
    for (size, full, quick) in CASES {
        let steps = if opts.quick { quick } else { full };
        let demo = DemoOptions { size, steps, out: None, snapshot_every: 10 };
        let (rate, field, bytes) = measure(b, &demo, runs, &pb)?;
        let (cpu_rate, cpu_field, _) = measure(&cpu, &demo, runs, &pb)?;
        let (mine, theirs) = (checksum(&field), checksum(&cpu_field));
        if mine != theirs {
            return Err(Error::invalid(format!(
                "demo {size}x{size}, {steps} steps: checksum {mine:016x} on {}, {theirs:016x} on the CPU backend",
                B::KIND
            )));
        }
        out.push(Entry::versus(format!("steps_per_s/{size}"), rate, "steps/s", cpu_rate));
        out.push(Entry {
            name: format!("host_bytes_per_step/{size}"),
            value: bytes as f64 / steps as f64,
            unit: "B".into(),
            baseline: None,
            ratio: None,
        });
    }
    pb.finish_and_clear();
    Ok(out)
}
