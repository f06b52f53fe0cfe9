//! `cargo xtask test-all`.

use crate::deps;
use crate::sh::{capture, run_ok, run_tee};
use std::collections::BTreeMap;
use std::process::Command;

/// Whether each backend can run here, from `gpubuf info --json`.
struct Probe {
    available: BTreeMap<String, Result<String, String>>,
}

fn probe() -> Probe {
    let mut available = BTreeMap::new();
    let out = capture(Command::new("cargo").args([
        "run",
        "--quiet",
        "-p",
        "gpubuf-cli",
        "--features",
        "opencl,cuda",
        "--",
        "info",
        "--json",
    ]));
    let parsed: Vec<serde_json::Value> = out.and_then(|o| serde_json::from_str(&o).ok()).unwrap_or_default();
    for name in ["cpu", "opencl", "cuda"] {
        let entry = parsed.iter().find(|v| v["backend"] == name);
        let status = match entry {
            Some(v) if v["available"] == true => {
                Ok(v["devices"][0]["name"].as_str().unwrap_or("device").to_string())
            }
            Some(v) => Err(v["reason"].as_str().unwrap_or("unavailable").to_string()),
            None => Err("gpubuf info did not report it".to_string()),
        };
        available.insert(name.to_string(), status);
    }
    Probe { available }
}

/// Counts `test NAME ... ok` lines per backend: names ending in `::opencl` / `::cuda`
/// are that backend's; everything else (CPU bodies, unit, doc and cross-backend tests)
/// counts for the CPU.
fn count(lines: &[String]) -> (BTreeMap<&'static str, usize>, usize, usize) {
    let mut per = BTreeMap::from([("cpu", 0), ("opencl", 0), ("cuda", 0)]);
    let (mut passed, mut failed) = (0, 0);
    for l in lines {
        let Some(rest) = l.strip_prefix("test ") else { continue };
        let Some((name, result)) = rest.rsplit_once(" ... ") else { continue };
        match result.trim() {
            "ok" => {
                passed += 1;
                let key = if name.ends_with("::opencl") {
                    "opencl"
                } else if name.ends_with("::cuda") {
                    "cuda"
                } else {
                    "cpu"
                };
                *per.entry(key).or_default() += 1;
            }
            r if r.starts_with("FAILED") => failed += 1,
            _ => {}
        }
    }
    (per, passed, failed)
}

/// Runs everything; true when it all passed.
pub fn test_all() -> bool {
    let ci = std::env::var("CI").map(|v| v == "true" || v == "1").unwrap_or(false);
    let problems = deps::install();
    for p in &problems {
        eprintln!("xtask: {p}");
    }
    let mut ok = true;
    ok &= run_ok(Command::new("cargo").args(["fmt", "--all", "--", "--check"]));
    ok &= run_ok(Command::new("cargo").args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]));
    ok &= run_ok(
        Command::new("cargo")
            .args(["doc", "--no-deps", "--workspace", "--all-features"])
            .env("RUSTDOCFLAGS", "-Dwarnings"),
    );
    if !ok {
        eprintln!("xtask: fmt, clippy or doc failed");
        return false;
    }

    let probe = probe();
    let nvrtc = deps::nvrtc_dir();
    let mut require = vec!["cpu".to_string()];
    let mut skip = Vec::new();
    for name in ["opencl", "cuda"] {
        match &probe.available[name] {
            Ok(_) => require.push(name.to_string()),
            Err(_) => skip.push(format!("::{name}")),
        }
    }
    if nvrtc.is_some() {
        require.push("nvrtc".into());
    }
    let mut cmd = Command::new("cargo");
    cmd.args([
        "test",
        "--workspace",
        "--features",
        "gpubuf-testkit/opencl,gpubuf-testkit/cuda,gpubuf-cli/opencl,gpubuf-cli/cuda",
        "--",
    ]);
    for s in &skip {
        cmd.args(["--skip", s]);
    }
    cmd.env("GPUBUF_REQUIRE", require.join(","));
    if let Some(dir) = &nvrtc {
        let old = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
        cmd.env("LD_LIBRARY_PATH", format!("{}:{old}", dir.display()));
    }
    let (lines, tests_ok) = run_tee(&mut cmd);

    // Halo exchange across ranks: the MPI test binary under mpirun, 4 and 6 ranks.
    let mpi = run_mpi_tests();

    // The examples must run as written, on every backend that can run here.
    let mut examples_ok = run_ok(Command::new("cargo").args([
        "run",
        "--quiet",
        "-p",
        "gpubuf-examples",
        "--example",
        "batch_frames",
    ]));
    if probe.available["opencl"].is_ok() {
        examples_ok &= run_ok(Command::new("cargo").args([
            "run",
            "--quiet",
            "-p",
            "gpubuf-examples",
            "--features",
            "opencl",
            "--example",
            "batch_frames",
            "--",
            "opencl",
        ]));
    }
    let (per, passed, failed) = count(&lines);
    let ptx = lines.iter().any(|l| l.starts_with("test cuda_kernels_compile_to_ptx ... ok"));

    println!();
    println!("== gpubuf test-all summary ==");
    let mut backend_ok = true;
    for name in ["cpu", "opencl", "cuda"] {
        match &probe.available[name] {
            Ok(device) if per[name] > 0 => println!("backend {name}: ran {} tests (on {device})", per[name]),
            Ok(device) => {
                println!("backend {name}: ran 0 tests (on {device})");
                backend_ok &= name == "cuda";
            }
            Err(reason) => {
                println!("backend {name}: skipped ({reason})");
                if ci && name != "cuda" {
                    eprintln!("xtask: CI=true and the {name} backend was skipped");
                    backend_ok = false;
                }
            }
        }
    }
    match (&nvrtc, ptx) {
        (Some(_), true) => println!("cuda kernels: compiled to PTX by NVRTC"),
        (Some(_), false) => {
            println!("cuda kernels: NVRTC present but the PTX test did not pass");
            backend_ok = false;
        }
        (None, _) => println!("cuda kernels: not compiled (NVRTC missing: pip install {})", deps::NVRTC_PIP),
    }
    match &mpi {
        Ok((p, f)) => println!("mpi: mpirun -n 4 and -n 6 ran, {p} passed, {f} failed"),
        Err(reason) => println!("mpi: FAILED ({reason})"),
    }
    println!("examples: {}", if examples_ok { "ran" } else { "FAILED" });
    println!("{passed} passed, {failed} failed");
    let mpi_ok = matches!(mpi, Ok((_, 0)));
    tests_ok && examples_ok && mpi_ok && backend_ok && failed == 0 && (problems.is_empty() || !ci)
}

/// Builds the MPI test binary and runs it under `mpirun -n 4` and `-n 6`; returns the
/// passed and failed counts rank 0 printed.
fn run_mpi_tests() -> Result<(usize, usize), String> {
    let json = capture(Command::new("cargo").args([
        "test",
        "--no-run",
        "-p",
        "gpubuf-mpi",
        "--test",
        "mpi_halo",
        "--message-format=json",
    ]))
    .ok_or("building the MPI tests failed")?;
    let exe = json
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "mpi_halo")
        .filter_map(|v| v["executable"].as_str().map(String::from))
        .next_back()
        .ok_or("no mpi_halo test binary")?;
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let (mut passed, mut failed) = (0, 0);
    for n in ["4", "6"] {
        let mut cmd = Command::new("mpirun");
        if root {
            cmd.arg("--allow-run-as-root");
        }
        cmd.args(["--oversubscribe", "-n", n, &exe]);
        let (lines, ok) = run_tee(&mut cmd);
        let summary = lines.iter().rev().find_map(|l| {
            let (p, rest) = l.split_once(" passed, ")?;
            let f = rest.strip_suffix(" failed")?;
            Some((p.trim().parse::<usize>().ok()?, f.trim().parse::<usize>().ok()?))
        });
        match summary {
            Some((p, f)) => {
                passed += p;
                failed += f;
            }
            None => return Err(format!("mpirun -n {n} printed no summary")),
        }
        if !ok {
            failed = failed.max(1);
        }
    }
    // The demo: the same checksum with 1 and 4 ranks.
    if !run_ok(Command::new("cargo").args(["build", "--quiet", "-p", "gpubuf-cli", "--features", "mpi"])) {
        return Err("building the demo with MPI failed".into());
    }
    let demo = |n: &str| -> Option<String> {
        let mut cmd = Command::new("mpirun");
        if root {
            cmd.arg("--allow-run-as-root");
        }
        cmd.args([
            "--oversubscribe",
            "-n",
            n,
            "target/debug/gpubuf",
            "demo",
            "--size",
            "64",
            "--steps",
            "40",
            "--out",
        ]);
        cmd.arg(std::env::temp_dir().join(format!("gpubuf-demo-{n}.svg")));
        let (lines, ok) = run_tee(&mut cmd);
        ok.then(|| lines.iter().find_map(|l| l.strip_prefix("checksum ").map(String::from))).flatten()
    };
    match (demo("1"), demo("4")) {
        (Some(a), Some(b)) if a == b => {
            println!("demo: 1 rank and 4 ranks agree ({a})");
            passed += 1;
        }
        (a, b) => {
            println!("demo: checksums differ or missing: 1 rank {a:?}, 4 ranks {b:?}");
            failed += 1;
        }
    }
    Ok((passed, failed))
}
