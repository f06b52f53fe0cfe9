//! `cargo xtask test-all`.

use crate::deps;
use crate::sh::{self, capture, run_ok, run_tee};
use crate::summary::{count, Tally};
use crate::{cudagen, doccover, miri, mpi, pace, pyopencl, python, zarr};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether each backend can run here, from `gpubuf info --json`.
fn probe() -> BTreeMap<&'static str, Result<String, String>> {
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
        available.insert(name, status);
    }
    available
}

/// The test features: every backend compiled in; those that cannot run are skipped.
const FEATURES: &str = "gpubuf-testkit/opencl,gpubuf-testkit/cuda,gpubuf-cli/opencl,gpubuf-cli/cuda";

/// Runs `f` as the step `name` with a limit of `minutes` (see [`sh::step`]): a step still
/// running then is stopped, and that is one more failure, named in the summary.
fn limited<R>(tally: &mut Tally, name: &str, minutes: u64, f: impl FnOnce(&mut Tally) -> R) -> R {
    let (r, stopped) = sh::step(name, sh::limit(Duration::from_secs(minutes * 60)), || f(tally));
    if let Some(line) = stopped {
        tally.fail(line);
    }
    r
}

/// Runs everything; true when it all passed. The closing line counts every failed test
/// and every failed step (fmt, clippy, docs, a test binary that did not build, crashed or
/// was stopped at its step's time limit, MPI, the demo, the examples, Miri, a backend CI
/// needs that was skipped). Each part runs under a time limit of its own (a hung `mpirun`
/// or `pytest` is stopped and named, and the run goes on).
pub fn test_all() -> bool {
    let started = Instant::now();
    let mut lap = Laps::new();
    let ci = std::env::var("CI").map(|v| v == "true" || v == "1").unwrap_or(false);
    if ci && std::env::var_os("CARGO_INCREMENTAL").is_none() {
        // A CI run builds once: incremental state would only take disk (gigabytes across the
        // profiles and feature sets test-all builds), and a full disk fails every later step.
        // Set before any thread or child starts, so every cargo below inherits it.
        std::env::set_var("CARGO_INCREMENTAL", "0");
    }
    let mut tally = Tally::default();
    let problems = limited(&mut tally, "install-deps", 20, |_| deps::install());
    for p in problems {
        eprintln!("xtask: {p}");
        if ci {
            tally.fail(format!("install-deps: FAILED ({p})"));
        }
    }
    let ok = limited(&mut tally, "fmt", 5, |_| {
        run_ok(Command::new("cargo").args(["fmt", "--all", "--", "--check"]))
    });
    tally.step("fmt", ok);
    let ok = limited(&mut tally, "clippy", 30, |_| {
        run_ok(Command::new("cargo").args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]))
    });
    tally.step("clippy", ok);
    let ok = limited(&mut tally, "doc", 20, |_| {
        run_ok(
            Command::new("cargo")
                .args(["doc", "--no-deps", "--workspace", "--all-features"])
                .env("RUSTDOCFLAGS", "-Dwarnings"),
        )
    });
    tally.step("doc", ok);
    if ok {
        tally.step("doc coverage (every member crate's item in gpubuf's docs)", doccover::check());
    }
    lap.mark("deps, fmt, clippy, doc");
    limited(&mut tally, "cuda kernels", 10, cudagen::check);
    lap.mark("cuda kernels");

    let probe = limited(&mut tally, "probe", 20, |_| probe());
    let nvrtc = deps::nvrtc_dir();
    let mut require = vec!["cpu".to_string()];
    let mut skip = Vec::new();
    for name in ["opencl", "cuda"] {
        match &probe[name] {
            Ok(_) => require.push(name.to_string()),
            Err(_) => skip.push(format!("::{name}")),
        }
    }
    if nvrtc.is_some() {
        require.push("nvrtc".into());
    }
    let env = |cmd: &mut Command| {
        cmd.env("GPUBUF_REQUIRE", require.join(","));
        if let Some(dir) = &nvrtc {
            let old = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
            cmd.env("LD_LIBRARY_PATH", format!("{}:{old}", dir.display()));
        }
    };
    let mut cmd = Command::new("cargo");
    cmd.args(["test", "--workspace", "--no-fail-fast", "--features", FEATURES, "--"]);
    for s in &skip {
        cmd.args(["--skip", s]);
    }
    env(&mut cmd);
    let (test_lines, tests_ok) = limited(&mut tally, "cargo test", 45, |_| run_tee(&mut cmd));
    let counts = count(&test_lines);
    tally.tests("cargo test", &counts, tests_ok);
    lap.mark("cargo test");

    // The hostile-input suites again in release, where overflow wraps instead of panicking.
    let mut cmd = Command::new("cargo");
    cmd.args([
        "test",
        "--release",
        "--no-fail-fast",
        "-p",
        "gpubuf-testkit",
        "--features",
        "opencl,cuda",
        "--test",
        "hostile_*",
        "--",
    ]);
    for s in &skip {
        cmd.args(["--skip", s]);
    }
    env(&mut cmd);
    let (lines, ok) = limited(&mut tally, "hostile (release)", 25, |_| run_tee(&mut cmd));
    let hostile = count(&lines);
    tally.tests("hostile (release)", &hostile, ok);
    tally.note(format!("hostile inputs (release): {} passed, {} failed", hostile.passed, hostile.failed));
    lap.mark("hostile");

    // The block plan kernel's 64-bit index path, which only blocks reaching past 2^31
    // elements take: the plan tests again with every block on it (OpenCL, block shape).
    if probe["opencl"].is_ok() {
        let mut cmd = Command::new("cargo");
        cmd.args(["test", "--no-fail-fast", "-p", "gpubuf-testkit", "--features", "opencl,cuda"]);
        cmd.args(["--test", "plan_shapes", "--test", "plans", "--"]);
        for s in &skip {
            cmd.args(["--skip", s]);
        }
        cmd.env("GPUBUF_CL_NARROW_INDEX", "0");
        env(&mut cmd);
        let (lines, ok) = limited(&mut tally, "wide index", 10, |_| run_tee(&mut cmd));
        tally.tests("block kernel, 64-bit index", &count(&lines), ok);
    } else {
        tally.note("block kernel, 64-bit index: skipped (no OpenCL device)".to_string());
    }
    lap.mark("wide index");

    limited(&mut tally, "miri", 40, miri::run);
    lap.mark("miri");
    limited(&mut tally, "mpi", 25, mpi::run);
    lap.mark("mpi");

    // The Python package: its wheel built by maturin in a venv, its pytest suite.
    match limited(&mut tally, "python", 35, |_| python::run(&require.join(","))) {
        Ok(c) => {
            tally.passed += c.passed;
            tally.failed += c.failed;
            tally.note(format!("python: {} passed, {} failed, {} skipped", c.passed, c.failed, c.skipped));
        }
        Err(e) => tally.fail(format!("python: FAILED ({e})")),
    }
    lap.mark("python");

    // pace-util 0.9.0's own tests with gpubuf swapped in, all but `mpirun -n 24` (CI's time
    // budget; `cargo xtask pace` runs that too); the wheel above is reused (cargo no-op).
    let r = limited(&mut tally, "pace", 12, |_| {
        pace::run(&require.join(","), false, pace::Scope::TestAll, true).map(|r| (r.total, r.lines))
    });
    peer_suite(&mut tally, "pace", r);
    lap.mark("pace");

    // zarr-python 3.1.6's own tests with gpubuf's classes as zarr's defaults (the wheel
    // above is reused).
    let r =
        limited(&mut tally, "zarr", 12, |_| zarr::run(&require.join(","), true).map(|r| (r.total, r.lines)));
    peer_suite(&mut tally, "zarr", r);
    lap.mark("zarr");

    // pyopencl 2026.1.4's own pool and allocator tests with gpubuf's classes in
    // pyopencl.tools (the wheel above is reused).
    let r = limited(&mut tally, "pyopencl", 8, |_| {
        pyopencl::run(&require.join(","), true).map(|r| (r.total, r.lines))
    });
    peer_suite(&mut tally, "pyopencl", r);
    lap.mark("pyopencl");

    // The examples must run as written, on every backend that can run here.
    let mut backends = vec!["cpu"];
    if probe["opencl"].is_ok() {
        backends.push("opencl");
    }
    // (name, whether it takes the backend as its argument): the others pick theirs.
    let examples = [
        ("batch_frames", true),
        ("first_hour", true),
        ("first_hour_kernel", true),
        ("adopt_foreign", true),
        ("opencl_halo_kernel", false),
    ];
    for (name, per_backend) in examples {
        let runs: Vec<Option<&str>> =
            if per_backend { backends.iter().map(|&b| Some(b)).collect() } else { vec![None] };
        for b in runs {
            let mut cmd = Command::new("cargo");
            cmd.args(["run", "--quiet", "-p", "gpubuf-examples", "--features", "opencl", "--example", name]);
            if let Some(b) = b {
                cmd.args(["--", b]);
            }
            let label = b.map_or(format!("example {name}"), |b| format!("example {name} on {b}"));
            let ok = limited(&mut tally, &label, 10, |_| run_ok(&mut cmd));
            tally.step(&label, ok);
        }
    }
    // Without a GPU it must say so and exit successfully.
    let mut cmd = Command::new("cargo");
    cmd.args(["run", "--quiet", "-p", "gpubuf-examples", "--features", "cuda", "--example", "cuda_kernel"]);
    let ok = limited(&mut tally, "example cuda_kernel", 10, |_| run_ok(&mut cmd));
    tally.step("example cuda_kernel", ok);
    lap.mark("examples");

    let ptx = test_lines.iter().any(|l| l.starts_with("test cuda_kernels_compile_to_ptx ... ok"));
    println!();
    println!("== gpubuf test-all summary ==");
    for name in ["cpu", "opencl", "cuda"] {
        let ran = counts.per[name];
        match &probe[name] {
            Ok(device) if ran > 0 => println!("backend {name}: ran {ran} tests (on {device})"),
            Ok(device) if name == "cuda" => println!("backend {name}: ran 0 tests (on {device})"),
            Ok(device) => tally.fail(format!("backend {name}: FAILED (ran 0 tests on {device})")),
            Err(reason) if ci && name != "cuda" => {
                tally.fail(format!("backend {name}: FAILED (skipped under CI=true: {reason})"))
            }
            Err(reason) => println!("backend {name}: skipped ({reason})"),
        }
    }
    match &nvrtc {
        Some(_) if ptx => println!("cuda kernels: compiled to PTX by NVRTC"),
        Some(_) => tally.fail("cuda kernels: FAILED (NVRTC present but the PTX test did not pass)".into()),
        None => println!("cuda kernels: not compiled (NVRTC missing: pip install {})", deps::NVRTC_PIP),
    }
    for l in &tally.lines {
        println!("{l}");
    }
    println!("time: {} (total {}s)", lap.parts.join(", "), started.elapsed().as_secs());
    println!("{} passed, {} failed", tally.passed, tally.failed);
    tally.failed == 0
}

/// Adds a peer project's suite (pace-util's, zarr's) to the tally: its counts and a line
/// a part, or its failure to run.
fn peer_suite(tally: &mut Tally, name: &str, result: Result<(crate::python::PyCounts, Vec<String>), String>) {
    match result {
        Ok((t, lines)) => {
            tally.passed += t.passed;
            tally.failed += t.failed;
            for l in lines {
                tally.note(l);
            }
            tally.note(format!("{name}: {} passed, {} failed, {} skipped", t.passed, t.failed, t.skipped));
        }
        Err(e) => tally.fail(format!("{name}: FAILED ({e})")),
    }
}

/// Wall time per part of the run, for the summary (CI has a time budget).
struct Laps {
    last: Instant,
    parts: Vec<String>,
}

impl Laps {
    fn new() -> Self {
        Laps { last: Instant::now(), parts: Vec::new() }
    }

    /// Ends the part called `name` now.
    fn mark(&mut self, name: &str) {
        let now = Instant::now();
        self.parts.push(format!("{name} {}s", (now - self.last).as_secs()));
        self.last = now;
    }
}
