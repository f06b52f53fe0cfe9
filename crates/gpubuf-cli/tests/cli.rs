//! The `gpubuf` binary end to end.

use std::process::Command;

fn gpubuf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpubuf"))
}

fn info_json(cmd: &mut Command) -> Vec<serde_json::Value> {
    let out = cmd.args(["info", "--json"]).output().expect("gpubuf runs");
    assert!(out.status.success(), "gpubuf info failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("info --json prints JSON")
}

#[test]
fn info_lists_cpu_as_available() {
    let v = info_json(&mut gpubuf());
    let cpu = v.iter().find(|b| b["backend"] == "cpu").expect("cpu listed");
    assert_eq!(cpu["available"], true);
    assert!(cpu["devices"][0]["total_memory"].as_u64().unwrap_or(0) > 0);
    assert_eq!(v.len(), 3, "every backend is listed, compiled in or not");
}

#[test]
fn no_opencl_platform_is_an_error_not_a_panic() {
    // ocl-icd reads vendor files from OCL_ICD_VENDORS: an empty folder means no platform.
    let empty = std::env::temp_dir().join("gpubuf-no-icd");
    std::fs::create_dir_all(&empty).expect("temp dir");
    let v = info_json(gpubuf().env("OCL_ICD_VENDORS", &empty));
    let cl = v.iter().find(|b| b["backend"] == "opencl").expect("opencl listed");
    assert_eq!(cl["available"], false);
    let reason = cl["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("unavailable"), "{reason}");
    // A benchmark on it fails cleanly with the reason.
    let out = gpubuf()
        .env("OCL_ICD_VENDORS", &empty)
        .args(["bench", "copy", "--backend", "opencl", "--quick", "--reps", "1"])
        .output()
        .expect("gpubuf runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("opencl unavailable"));
}

#[test]
fn bench_json_has_the_contract_shape() {
    let out = gpubuf().args(["bench", "copy", "--quick", "--reps", "2", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["bench"], "copy");
    assert_eq!(v["backend"], "cpu");
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 8);
    for r in results {
        let (value, base, ratio) = (r["value"].as_f64(), r["baseline"].as_f64(), r["ratio"].as_f64());
        assert!(value.unwrap_or(0.0) > 0.0 && base.unwrap_or(0.0) > 0.0, "{r}");
        let expect = value.unwrap_or(0.0) / base.unwrap_or(1.0);
        assert!((ratio.unwrap_or(0.0) - expect).abs() < 1e-9 * expect.max(1.0), "{r}");
        assert_eq!(r["unit"], "GB/s");
    }
}

/// The width and height of a PNG file, after checking its signature.
fn png_size(path: &std::path::Path) -> (u32, u32) {
    let bytes = std::fs::read(path).expect("image written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{} is not a PNG", path.display());
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (be(16), be(20))
}

#[test]
fn bench_plots_png_or_svg_and_rejects_other_formats() {
    let png = std::env::temp_dir().join("gpubuf-copy-test.png");
    let _ = std::fs::remove_file(&png);
    let out = gpubuf()
        .args(["bench", "copy", "--quick", "--reps", "1", "--plot"])
        .arg(&png)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (w, h) = png_size(&png);
    assert!(w >= 600 && h >= 400, "{w}x{h}");
    let svg = std::env::temp_dir().join("gpubuf-copy-test.svg");
    let out = gpubuf()
        .args(["bench", "copy", "--quick", "--reps", "1", "--plot"])
        .arg(&svg)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).expect("plot written");
    assert!(text.contains("<svg") && text.contains("contig/gather_gbps") && text.contains("baseline"));
    // Another extension is refused before anything is measured.
    let out =
        gpubuf().args(["bench", "copy", "--quick", "--reps", "1", "--plot", "x.txt"]).output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(".png or .svg"));
    let out = gpubuf().args(["bench", "nope"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2), "an unknown benchmark is a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid value 'nope'") && err.contains("copy, pool"), "{err}");
}

#[test]
fn a_bad_backend_is_a_usage_error() {
    for cmd in [&["bench", "copy"][..], &["demo", "--size", "8"][..]] {
        let out = gpubuf().args(cmd).args(["--backend", "tpu"]).output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: clap's usage error");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("invalid value 'tpu'") && err.contains("cpu, opencl, cuda"), "{err}");
    }
}

#[test]
fn reps_outside_their_range_are_a_usage_error() {
    // Past the range the counts made from it (progress bars, timings kept) overflowed or
    // asked for more memory than exists.
    for reps in ["0", "1000001", "2305843009213693952", "18446744073709551615"] {
        for bench in ["copy", "halo", "pool"] {
            let out = gpubuf().args(["bench", bench, "--quick", "--reps", reps]).output().expect("runs");
            assert_eq!(out.status.code(), Some(2), "--reps {reps}: clap's usage error");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("--reps"), "{err}");
        }
    }
}

#[test]
fn output_that_cannot_be_written_is_an_error_not_a_panic() {
    let full = std::path::Path::new("/dev/full");
    if !full.exists() {
        return; // not Linux: nothing to write into that is always full
    }
    for cmd in [
        &["bench", "copy", "--quick", "--reps", "1", "--json"][..],
        &["bench", "--list"],
        &["info", "--json"],
    ] {
        let out = gpubuf()
            .args(cmd)
            .stdout(std::fs::File::create(full).expect("/dev/full"))
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {err}");
        assert!(err.starts_with("gpubuf: ") && err.contains("stdout") && !err.contains("panicked"), "{err}");
    }
}

#[test]
fn bench_without_a_name_is_a_usage_error_and_plot_paths_are_checked_first() {
    let out = gpubuf().args(["bench", "--json"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing on stdout for a --json pipeline to mistake for a report");
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a benchmark name"));
    // A folder that does not exist: refused before anything is measured.
    let root = std::env::temp_dir().join(format!("gpubuf-cli-plot-{}", std::process::id()));
    let missing = root.join("no").join("x.png");
    let out = gpubuf()
        .args(["bench", "copy", "--reps", "1", "--json", "--plot"])
        .arg(&missing)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "refused before the run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write"));
    assert!(!root.exists());
}

/// Runs the demo; returns its stdout after checking the image it wrote.
fn demo_run(backend: &str, size: usize, steps: usize) -> String {
    let png = std::env::temp_dir().join(format!("gpubuf-demo-{backend}-{size}-{steps}.png"));
    let _ = std::fs::remove_file(&png);
    let out = gpubuf()
        .args(["demo", "--size", &size.to_string(), "--steps", &steps.to_string(), "--backend", backend])
        .arg("--out")
        .arg(&png)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (w, h) = png_size(&png);
    assert!(w >= 500 && h >= 500, "{w}x{h}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn checksum_of(stdout: &str) -> Option<String> {
    stdout.lines().find_map(|l| {
        l.strip_prefix("checksum ").map(|c| c.split_whitespace().next().unwrap_or("").to_string())
    })
}

fn available(backend: &str) -> bool {
    let v = info_json(&mut gpubuf());
    v.iter().find(|b| b["backend"] == backend).map(|b| b["available"] == true).unwrap_or(false)
}

fn opencl_available() -> bool {
    available("opencl")
}

/// Whether `GPUBUF_REQUIRE` names `backend` (then it must run, not skip).
fn required(backend: &str) -> bool {
    std::env::var("GPUBUF_REQUIRE").is_ok_and(|v| v.split(',').any(|b| b.trim() == backend))
}

/// Checksums of the host-computed stencil the demo ran before it moved to the device
/// (size, steps, checksum): the device stencils must reproduce them bit for bit, after an
/// even and an odd number of steps (the field ends in either device array).
const HOST_CHECKSUMS: [(usize, usize, &str); 3] =
    [(64, 60, "400e958e2a1d4834"), (64, 61, "8066592cb70833ac"), (3, 5, "44fe90f66e70f70d")];

#[test]
fn demo_matches_the_host_stencil_on_every_backend() {
    let mut backends = vec!["cpu"];
    for device in ["opencl", "cuda"] {
        if available(device) {
            backends.push(device);
        } else {
            assert!(!required(device), "{device} is required (GPUBUF_REQUIRE) but unavailable");
            eprintln!("{device} skipped: unavailable");
        }
    }
    for backend in backends {
        for (size, steps, want) in HOST_CHECKSUMS {
            let stdout = demo_run(backend, size, steps);
            assert_eq!(checksum_of(&stdout).as_deref(), Some(want), "{backend} {size} {steps}: {stdout}");
            // One rank: nothing crosses the host inside the step loop.
            assert!(stdout.contains(" 0 host bytes/step"), "{stdout}");
            assert!(stdout.contains(&format!("backend {backend}")), "{stdout}");
        }
    }
}

#[test]
fn bench_demo_compares_against_the_cpu() {
    let out = gpubuf().args(["bench", "demo", "--quick", "--reps", "1", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["bench"], "demo");
    let results = v["results"].as_array().expect("results");
    let names: Vec<&str> = results.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(
        names,
        ["steps_per_s/256", "host_bytes_per_step/256", "steps_per_s/1024", "host_bytes_per_step/1024"]
    );
    for r in results {
        let value = r["value"].as_f64().expect("a value");
        if r["unit"] == "steps/s" {
            let base = r["baseline"].as_f64().expect("the CPU baseline");
            assert!(value > 0.0 && base > 0.0, "{r}");
            let ratio = r["ratio"].as_f64().expect("a ratio");
            assert!((ratio - value / base).abs() < 1e-9 * ratio.max(1.0), "{r}");
        } else {
            assert_eq!((r["unit"].as_str(), value), (Some("B"), 0.0), "{r}");
        }
    }
    if opencl_available() {
        // The bench fails when the OpenCL field differs from the CPU's.
        let out = gpubuf()
            .args(["bench", "demo", "--quick", "--reps", "1", "--backend", "opencl"])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Runs `gpubuf demo` with `args`; returns (exit code, stderr). A signal (an abort) has no
/// exit code and fails the test.
fn demo_failure(args: &[&str]) -> (i32, String) {
    let out_png = std::env::temp_dir().join("gpubuf-demo-refused.png");
    let out = gpubuf().arg("demo").args(args).arg("--out").arg(&out_png).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code().unwrap_or_else(|| panic!("demo {args:?} was killed: {stderr}"));
    assert!(!stderr.contains("panicked"), "demo {args:?} panicked: {stderr}");
    (code, stderr)
}

#[test]
fn demo_too_big_for_memory_is_a_clear_error() {
    // 100000^2 cells: about 1 TB; it used to abort allocating the host field.
    for backend in ["cpu", "opencl"] {
        let (code, stderr) = demo_failure(&["--size", "100000", "--steps", "1", "--backend", backend]);
        assert_eq!(code, 1, "{stderr}");
        if backend == "cpu" || !stderr.contains("unavailable") {
            assert!(stderr.contains("out of memory: requested"), "{stderr}");
            assert!(stderr.contains("demo --size 100000 does not fit"), "{stderr}");
        }
    }
}

#[test]
fn demo_options_out_of_range_are_clear_errors() {
    // Usage errors, as clap's own (status 2), naming the flag, the value and the range.
    for (args, says) in [
        (vec!["--size", "0"], "'0' for '--size"),
        (vec!["--size", "18446744073709551616"], "'18446744073709551616' for '--size"),
        (vec!["--size", "1048577"], "1..=1048576"),
        (vec!["--steps", "1000000001", "--size", "8"], "'1000000001' for '--steps"),
    ] {
        let (code, stderr) = demo_failure(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // The smallest grid still runs.
    let out = gpubuf()
        .args(["demo", "--size", "1", "--steps", "2", "--out"])
        .arg(std::env::temp_dir().join("gpubuf-demo-1.png"))
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
