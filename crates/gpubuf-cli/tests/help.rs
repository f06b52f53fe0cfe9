//! The `gpubuf` help texts and the `info` table.

use std::process::Command;

fn stdout_of(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpubuf")).args(args).output().expect("gpubuf runs");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn help_lists_the_commands_docs_and_environment() {
    let help = stdout_of(&["--help"]);
    for command in ["info", "demo", "bench"] {
        let line = help.lines().find(|l| l.trim_start().starts_with(&format!("{command} ")));
        assert!(line.is_some_and(|l| l.len() > 20), "{command} has a one-line description:\n{help}");
    }
    assert!(help.contains("README.md") && help.contains("docs/benchmarks.md"), "{help}");
    for var in [
        "GPUBUF_OPENCL_DEVICE",
        "GPUBUF_CUDA_DEVICE",
        "GPUBUF_CL_CHUNK",
        "GPUBUF_LOG",
        "GPUBUF_MPI_CUDA_AWARE",
    ] {
        assert!(help.contains(var), "{var} missing:\n{help}");
    }
}

#[test]
fn bench_help_names_every_benchmark() {
    let help = stdout_of(&["bench", "--help"]);
    let list = stdout_of(&["bench", "--list"]);
    for name in ["copy", "pool", "bufferizer", "mirror", "halo", "demo"] {
        let listed = |text: &str| text.lines().any(|l| l.trim_start().starts_with(&format!("{name} ")));
        assert!(listed(&help), "{name} missing from bench --help:\n{help}");
        assert!(listed(&list), "{name} missing from bench --list:\n{list}");
    }
    let short = stdout_of(&["bench", "-h"]);
    assert!(short.contains("[possible values: cpu, opencl, cuda]"), "{short}");
}

#[test]
fn demo_help_says_what_it_prints_and_how_to_run_it_under_mpi() {
    let help = stdout_of(&["demo", "--help"]);
    for says in [
        "steps/s",
        "host bytes per step",
        "checksum",
        "cargo build --release -p gpubuf-cli --features mpi",
        "mpirun -n 4 target/release/gpubuf demo",
        "demo.png",
    ] {
        assert!(help.contains(says), "{says:?} missing:\n{help}");
    }
}

#[test]
fn info_says_why_a_backend_is_unavailable_once() {
    // ocl-icd reads vendor files from OCL_ICD_VENDORS: an empty folder means no platform.
    let empty = std::env::temp_dir().join("gpubuf-no-icd-help");
    std::fs::create_dir_all(&empty).expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_gpubuf"))
        .arg("info")
        .env("OCL_ICD_VENDORS", &empty)
        .output()
        .expect("gpubuf runs");
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table.lines().find(|l| l.starts_with("opencl")).expect("an opencl line");
    assert!(line.contains("compiled in, unavailable: "), "{line}");
    assert_eq!(line.matches("unavailable").count(), 1, "the reason is said once: {line}");
}
