//! `cargo xtask <command>`: the project's automation.
//!
//! * `test-all`: install missing system packages, then fmt check, clippy `-D warnings`,
//!   docs with warnings denied, the check that the embedded CUDA kernels match their
//!   sources (`cuda-kernels` below), and the tests of every backend that can run here; prints
//!   one line per backend (`backend <name>: ran N tests | skipped (<reason>)`), then the
//!   hostile-input suites in release, Miri over the CPU crates, the MPI tests and demo, the
//!   Python package (its wheel, then its pytest suite in a fresh venv under the target
//!   folder with the wheel installed and no Rust toolchain on its `PATH`), pace-util's own
//!   tests with gpubuf swapped in (`pace --test-all` below), and the examples. The closing `N passed, M failed` line counts every failed test and step.
//!   Under `CI=true` a skipped CPU or OpenCL backend fails the run. A test binary that
//!   crashes counts as failed with every test it never reported; each part runs under a
//!   time limit of its own (`GPUBUF_STEP_LIMIT=<seconds>` replaces them all), after which
//!   it is killed with its child processes and named in the summary.
//! * `install-deps`: only the installing.
//! * `gpu-bundle`: builds the test and bench binaries with CUDA into `gpu-bundle/`.
//! * `cuda-kernels`: compiles the CUDA kernels (`kernels/cuda/prelude.cuh` before the shared sources of `kernels/shared`) with a pinned NVRTC (12.0, installed by
//!   pip into a folder under the target folder) into the cubins and PTX the CUDA
//!   backend embeds, `crates/gpubuf-cuda/kernels/`; `test-all` fails when they are stale.
//!   `cuda-kernels --check` runs only that check.
//! * `wheel`: builds the `gpubuf` wheel (release, abi3, manylinux) into
//!   `<target>/python-wheels`, checks it with auditwheel and prints its path last.
//! * `python`: only the Python step of `test-all` (`GPUBUF_REQUIRE` from the environment):
//!   the wheel, installed in a fresh venv without Rust on its `PATH`, and its pytest suite.
//! * `pace [--baseline]`: pace-util 0.9.0's own halo and partitioner tests (its pinned
//!   sdist's `tests/`) with gpubuf swapped in, on the CPU and OpenCL and under `mpirun`;
//!   `--baseline` runs them without gpubuf, `--test-all` only what `test-all` runs of them
//!   (docs/python.md, "pace-util's own tests on gpubuf").
//! * `zarr`: zarr-python 3.1.6's own tests (its pinned sdist's `tests/`) with gpubuf's
//!   classes as zarr's default buffer and ndbuffer, on the CPU and OpenCL (docs/python.md,
//!   "zarr-python's own tests on gpubuf").
//! * `pyopencl`: pyopencl 2026.1.4's own pool and allocator tests (its pinned sdist's
//!   `test/`) with gpubuf's pool and allocators in `pyopencl.tools`, on OpenCL
//!   (docs/python.md, "pyopencl's own tests on gpubuf").

mod artifacts;
mod bundle;
mod cudagen;
mod deps;
mod doccover;
mod miri;
mod mpi;
mod pace;
mod pyopencl;
mod python;
#[cfg(test)]
mod rings;
mod sdist;
mod sh;
mod summary;
mod tests;
mod wheel;
mod wheel_mpi;
mod zarr;

use std::process::ExitCode;

fn main() -> ExitCode {
    let cmd = std::env::args().nth(1).unwrap_or_default();
    let ok = match cmd.as_str() {
        "test-all" | "ci" => tests::test_all(),
        "install-deps" => {
            let problems = deps::install();
            for p in &problems {
                eprintln!("xtask: {p}");
            }
            problems.is_empty()
        }
        "gpu-bundle" => bundle::build(),
        "doc-coverage" => doccover::check(),
        "python" => python::command(),
        "pace" => match std::env::args().nth(2).as_deref() {
            None => pace::command(false, pace::Scope::All),
            Some("--baseline") => pace::command(true, pace::Scope::All),
            Some("--test-all") => pace::command(false, pace::Scope::TestAll),
            Some(other) => {
                eprintln!("usage: cargo xtask pace [--baseline | --test-all], not `{other}`");
                false
            }
        },
        "wheel" => wheel::command(),
        "zarr" => zarr::command(),
        "pyopencl" => pyopencl::command(),
        "cuda-kernels" if std::env::args().nth(2).as_deref() == Some("--check") => {
            let mut tally = summary::Tally::default();
            cudagen::check(&mut tally);
            for l in &tally.lines {
                println!("{l}");
            }
            tally.failed == 0
        }
        "cuda-kernels" => cudagen::generate(),
        _ => {
            eprintln!(
                "usage: cargo xtask <test-all | install-deps | gpu-bundle | cuda-kernels [--check] | doc-coverage | wheel | python | pace [--baseline | --test-all] | zarr | pyopencl>"
            );
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
