//! The `gpubuf` command: `info` lists backends and devices, `bench` measures.

mod bench;
mod demo;
#[cfg(feature = "mpi")]
mod demo_mpi;
mod info;
mod plot;
#[cfg(feature = "cuda")]
#[allow(dead_code)]
mod stencil_cuda;

use clap::{Parser, Subcommand};
use gpubuf::BackendKind;
use std::path::PathBuf;
use std::process::ExitCode;

/// GPU memory toolkit: backends, buffers, copy plans.
#[derive(Parser)]
#[command(name = "gpubuf", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every backend: compiled in or not, available or not and why, devices with memory.
    Info {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Heat diffusion on a decomposed periodic domain using every component; run it under
    /// `mpirun -n N` with a build that has the `mpi` feature.
    Demo {
        /// Backend: cpu, opencl, cuda.
        #[arg(long, default_value = "cpu")]
        backend: String,
        /// Cells per side of the global grid (1 to 2^20, and what fits in memory).
        #[arg(long, default_value_t = 256)]
        size: usize,
        /// Time steps (at most 10^9).
        #[arg(long, default_value_t = 200)]
        steps: usize,
        /// SVG of the final field.
        #[arg(long, default_value = "demo.svg")]
        out: PathBuf,
        /// Snapshot the field into the bufferizer every this many steps (0: never).
        #[arg(long, default_value_t = 10)]
        snapshot_every: usize,
    },
    /// Run a benchmark and print a table (or JSON), optionally an SVG plot.
    Bench {
        /// Which benchmark (`gpubuf bench --list` names them).
        name: Option<String>,
        /// Backend to run on: cpu, opencl, cuda.
        #[arg(long, default_value = "cpu")]
        backend: String,
        /// Print the report as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Write a bar chart of the results to this SVG file.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Timed repetitions per case (the median is reported).
        #[arg(long, default_value_t = 15)]
        reps: usize,
        /// Smaller sizes, for a smoke run.
        #[arg(long)]
        quick: bool,
        /// List the benchmarks.
        #[arg(long)]
        list: bool,
    },
}

fn init_tracing() {
    // GPUBUF_LOG=trace shows the spans around every launch and copy.
    let level = match std::env::var("GPUBUF_LOG").unwrap_or_default().to_lowercase().as_str() {
        "trace" => tracing::Level::TRACE,
        "debug" => tracing::Level::DEBUG,
        "info" => tracing::Level::INFO,
        _ => tracing::Level::WARN,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .try_init();
}

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    // For a demo that does not fit: which size to shrink.
    let demo_size = match &cli.command {
        Command::Demo { size, .. } => Some(*size),
        _ => None,
    };
    let result = match cli.command {
        Command::Info { json } => info::run(json),
        Command::Demo { backend, size, steps, out, snapshot_every } => {
            backend.parse::<BackendKind>().and_then(|kind| {
                let opts = demo::DemoOptions { size, steps, out: Some(out), snapshot_every };
                #[cfg(feature = "mpi")]
                return demo_mpi::run(kind, &opts);
                #[cfg(not(feature = "mpi"))]
                demo::run(kind, &opts)
            })
        }
        Command::Bench { name, backend, json, plot, reps, quick, list } => {
            if list || name.is_none() {
                bench::list();
                Ok(())
            } else {
                backend.parse::<BackendKind>().and_then(|kind| {
                    let opts = bench::Options { reps: reps.max(1), quick, json, plot };
                    bench::run(name.as_deref().unwrap_or_default(), kind, &opts)
                })
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpubuf: {e}");
            if let (Some(size), gpubuf::Error::OutOfMemory { .. }) = (demo_size, &e) {
                eprintln!("gpubuf: demo --size {size} does not fit in the free memory; try a smaller --size (or more ranks under mpirun)");
            }
            ExitCode::FAILURE
        }
    }
}
