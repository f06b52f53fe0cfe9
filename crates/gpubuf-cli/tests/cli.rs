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

#[test]
fn bench_writes_an_svg_plot_and_rejects_other_formats() {
    let path = std::env::temp_dir().join("gpubuf-copy-test.svg");
    let _ = std::fs::remove_file(&path);
    let out = gpubuf()
        .args(["bench", "copy", "--quick", "--reps", "1", "--plot"])
        .arg(&path)
        .output()
        .expect("runs");
    assert!(out.status.success());
    let svg = std::fs::read_to_string(&path).expect("plot written");
    assert!(
        svg.starts_with("<svg") && svg.contains("contig/gather_gbps") && svg.trim_end().ends_with("</svg>")
    );
    let out =
        gpubuf().args(["bench", "copy", "--quick", "--reps", "1", "--plot", "x.png"]).output().expect("runs");
    assert!(!out.status.success());
    let out = gpubuf().args(["bench", "nope"]).output().expect("runs");
    assert!(!out.status.success());
    let out = gpubuf().args(["bench", "copy", "--backend", "tpu"]).output().expect("runs");
    assert!(!out.status.success());
}

fn demo_checksum(backend: &str) -> Option<String> {
    let out_svg = std::env::temp_dir().join(format!("gpubuf-demo-{backend}.svg"));
    let out = gpubuf()
        .args(["demo", "--size", "64", "--steps", "60", "--backend", backend, "--out"])
        .arg(&out_svg)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let svg = std::fs::read_to_string(&out_svg).expect("the field is written");
    assert!(svg.starts_with("<svg") && svg.matches("<rect").count() == 64 * 64);
    text.lines().find_map(|l| {
        l.strip_prefix("checksum ").map(|c| c.split_whitespace().next().unwrap_or("").to_string())
    })
}

#[test]
fn demo_runs_and_is_identical_on_cpu_and_opencl() {
    let cpu = demo_checksum("cpu").expect("a checksum line");
    assert_eq!(cpu.len(), 16);
    // OpenCL where a device exists (the info JSON says so).
    let v = info_json(&mut gpubuf());
    let cl = v.iter().find(|b| b["backend"] == "opencl").map(|b| b["available"] == true).unwrap_or(false);
    if cl {
        assert_eq!(
            demo_checksum("opencl").expect("a checksum line"),
            cpu,
            "CPU and OpenCL give the same field"
        );
    }
}

/// Runs `gpubuf demo` with `args`; returns (exit code, stderr). A signal (an abort) has no
/// exit code and fails the test.
fn demo_failure(args: &[&str]) -> (i32, String) {
    let out_svg = std::env::temp_dir().join("gpubuf-demo-refused.svg");
    let out = gpubuf().arg("demo").args(args).arg("--out").arg(&out_svg).output().expect("runs");
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
    for (args, says) in [
        (vec!["--size", "0"], "--size 0"),
        (vec!["--size", "18446744073709551615"], "--size 18446744073709551615"),
        (vec!["--size", "1048577"], "1 to 1048576"),
        (vec!["--steps", "1000000001", "--size", "8"], "--steps 1000000001"),
    ] {
        let (code, stderr) = demo_failure(&args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // The smallest grid still runs.
    let out = gpubuf()
        .args(["demo", "--size", "1", "--steps", "2", "--out"])
        .arg(std::env::temp_dir().join("gpubuf-demo-1.svg"))
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
