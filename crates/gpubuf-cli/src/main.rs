//! The `gpubuf` command: `info` lists backends and devices, `demo` runs the heat-diffusion
//! demo on a backend, `bench` measures.

mod bench;
mod demo;
#[cfg(feature = "mpi")]
mod demo_mpi;
mod info;
mod output;
mod plot;
mod report;
mod stencil;
mod stencil_cpu;
#[cfg(feature = "cuda")]
mod stencil_cuda;
mod stencil_fields;
#[cfg(feature = "opencl")]
mod stencil_opencl;

use clap::{Parser, Subcommand, ValueEnum};
use gpubuf::BackendKind;
use std::path::PathBuf;
use std::process::ExitCode;

/// What `gpubuf --help` prints after the commands.
/// The most timed repetitions `gpubuf bench --reps` takes: the counts made from it (the
/// progress bars' lengths, the timings kept) then stay far from any overflow.
const MAX_REPS: i64 = 1_000_000;

const AFTER_HELP: &str = "\
Docs: README.md (commands, examples), docs/benchmarks.md (every benchmark and its figures),
docs/backends.md (each backend and what it needs), docs/mpi.md (the demo across ranks).

Environment:
  GPUBUF_OPENCL_DEVICE  OpenCL device: flat index, `platform:device`, or a name substring
  GPUBUF_CUDA_DEVICE    CUDA device ordinal
  GPUBUF_CL_CHUNK       elements per work-item of the OpenCL copy kernel on CPU devices (default 64)
  GPUBUF_LOG            trace | debug | info: tracing spans around every copy and launch, on stderr
  GPUBUF_MPI_CUDA_AWARE 1 | 0: MPI reads CUDA device memory itself (default: asked of Open MPI)
  OCL_ICD_VENDORS       where the OpenCL loader looks for platforms (ocl-icd)
  LD_LIBRARY_PATH       where libcuda and libnvrtc are found for the CUDA backend";

/// What `gpubuf demo --help` prints after the options.
const DEMO_AFTER_HELP: &str = "\
Prints one line with the grid, steps, ranks, backend, steps/s, host bytes per step (bytes
that crossed between host and device in the timed loop: none with one rank, the staged halo
messages under MPI) and snapshot batches; then the checksum of the final field (the same on
every backend and any number of ranks); then writes the field as an image (--out).

Across MPI ranks (needs Open MPI, see docs/mpi.md):
  cargo build --release -p gpubuf-cli --features mpi
  mpirun -n 4 target/release/gpubuf demo";

/// GPU memory toolkit: backends, buffers, copy plans, and a demo that uses them all.
#[derive(Parser)]
#[command(name = "gpubuf", version, about, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// A backend on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    /// Host memory and rayon (always available).
    Cpu,
    /// OpenCL (any platform: PoCL, a GPU driver).
    Opencl,
    /// CUDA (needs the driver's libcuda; NVRTC only for user kernels and pre-Volta GPUs).
    Cuda,
}

impl From<BackendArg> for BackendKind {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Cpu => BackendKind::Cpu,
            BackendArg::Opencl => BackendKind::OpenCl,
            BackendArg::Cuda => BackendKind::Cuda,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Every backend: compiled in or not, available or not and why, devices with memory.
    Info {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Heat diffusion computed on the device with every component; steps/s and a checksum.
    #[command(after_help = DEMO_AFTER_HELP)]
    Demo {
        /// Backend to compute on.
        #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
        backend: BackendArg,
        /// Cells per side of the global grid (1 to 2^20, and what fits in memory).
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=demo::MAX_SIZE as u64))]
        size: u64,
        /// Time steps (at most 10^9).
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=demo::MAX_STEPS as u64))]
        steps: u64,
        /// Image of the final field: a heat map with its colour scale (.png or .svg).
        #[arg(long, default_value = "demo.png")]
        out: PathBuf,
        /// Snapshot the field into the bufferizer every this many steps (0: never).
        #[arg(long, default_value_t = 10)]
        snapshot_every: usize,
    },
    /// Run a benchmark and print a table (or JSON), optionally a bar chart (PNG or SVG).
    #[command(after_help = bench::help())]
    Bench {
        /// Which benchmark (listed below and by `gpubuf bench --list`).
        #[arg(value_parser = bench::names(), hide_possible_values = true)]
        name: Option<String>,
        /// Backend to run on.
        #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
        backend: BackendArg,
        /// Print the report as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Draw the results to this .png or .svg file: one panel per unit, value vs baseline.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Timed repetitions per case (the median is reported), 1 to 1000000.
        #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=MAX_REPS))]
        reps: u32,
        /// Smaller sizes, for a smoke run.
        #[arg(long)]
        quick: bool,
        /// `halo`: also report warm figures (caches not evicted) beside the cold ones.
        #[arg(long)]
        warm: bool,
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
    // Colours only for a terminal: a redirected log stays plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .try_init();
}

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    // For a demo that does not fit: which size to shrink.
    let demo_size = match &cli.command {
        // At most MAX_SIZE and MAX_STEPS (the parser's ranges): both fit in usize.
        Command::Demo { size, .. } => Some(*size as usize),
        _ => None,
    };
    let result = match cli.command {
        Command::Info { json } => info::run(json),
        Command::Demo { backend, size, steps, out, snapshot_every } => {
            plot::check_path(&out).and_then(|()| {
                let (size, steps) = (size as usize, steps as usize);
                let opts = demo::DemoOptions { size, steps, out: Some(out), snapshot_every };
                #[cfg(feature = "mpi")]
                return demo_mpi::run(backend.into(), &opts);
                #[cfg(not(feature = "mpi"))]
                demo::run(backend.into(), &opts)
            })
        }
        Command::Bench { name, backend, json, plot, reps, quick, warm, list } => match name {
            Some(name) if !list => {
                let checked = plot.as_deref().map_or(Ok(()), plot::check_path);
                checked.and_then(|()| {
                    // At most MAX_REPS (the parser's range): every count made from it fits.
                    let opts = bench::Options { reps: reps as usize, quick, json, plot, warm };
                    bench::run(&name, backend.into(), &opts)
                })
            }
            // `--list` alone lists; no name without it (a forgotten name in a `--json`
            // pipeline) is a usage error, as clap's own: the list on stderr, status 2.
            _ if list => bench::list(),
            _ => {
                eprintln!("error: gpubuf bench needs a benchmark name (or --list)\n\n{}", bench::help());
                return ExitCode::from(2);
            }
        },
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
