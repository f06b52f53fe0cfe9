//! `cargo xtask wheel`: the `gpubuf` wheel a Python user installs without Rust.
//!
//! maturin (pinned in a tools venv under the target directory, with auditwheel) builds
//! `crates/gpubuf-python` in release into `<target>/python-wheels`, with
//! `--compatibility pypi` (the lowest manylinux tag the extension's glibc symbols allow,
//! an error rather than a plain `linux` tag) and `--auditwheel check` (an error when the
//! extension links a shared library the manylinux policy does not allow and the wheel does
//! not bundle). Then `auditwheel show --json` reads the wheel again and [`check_report`]
//! holds it to the promise: tags `cp3x-abi3-manylinux_*`, no platform tag more compatible
//! than its symbols allow, no external library. The OpenCL loader (`libOpenCL.so.1`) and
//! the CUDA driver and NVRTC are opened at run time (`dlopen`), so none is linked and none
//! is bundled: the wheel holds the extension module and the Python sources only. Then the
//! MPI module `gpubuf/_mpi.abi3.so` is added ([`crate::wheel_mpi`]): it links the
//! machine's MPI library, never bundled, and only `import gpubuf.mpi` loads it.

use crate::sh::{capture, run_ok};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The build tools, pinned, with their dependencies: maturin builds the wheel, auditwheel
/// (pyelftools and packaging its dependencies) checks it.
pub const TOOL_PINS: [&str; 4] =
    ["maturin==1.16.0", "auditwheel==6.8.2", "pyelftools==0.33", "packaging==26.4"];

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The cargo target directory (`CARGO_TARGET_DIR` or `<root>/target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// The tags of a wheel's file name (`{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`);
/// compressed tag sets (`a.b`) split on the dots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelTags {
    /// Python tags, e.g. `cp310`.
    pub python: Vec<String>,
    /// ABI tags, e.g. `abi3`.
    pub abi: Vec<String>,
    /// Platform tags, e.g. `manylinux_2_34_x86_64`.
    pub platform: Vec<String>,
}

/// Reads the tags of the wheel file name `name` (no directory); `None` when it is not one.
pub fn wheel_tags(name: &str) -> Option<WheelTags> {
    let stem = name.strip_suffix(".whl")?;
    let parts: Vec<&str> = stem.split('-').collect();
    if !(5..=6).contains(&parts.len()) {
        return None;
    }
    let n = parts.len();
    let set = |s: &str| s.split('.').map(str::to_string).collect::<Vec<_>>();
    Some(WheelTags { python: set(parts[n - 3]), abi: set(parts[n - 2]), platform: set(parts[n - 1]) })
}

/// The glibc version and architecture a manylinux platform tag stands for
/// (`manylinux_2_34_x86_64`, or the legacy aliases `manylinux1`, `manylinux2010`,
/// `manylinux2014`); `None` for any other tag.
pub fn manylinux(tag: &str) -> Option<((u32, u32), String)> {
    let rest = tag.strip_prefix("manylinux")?;
    for (alias, glibc) in [("1_", (2, 5)), ("2010_", (2, 12)), ("2014_", (2, 17))] {
        if let Some(arch) = rest.strip_prefix(alias) {
            return (!arch.is_empty()).then(|| (glibc, arch.to_string()));
        }
    }
    let mut it = rest.strip_prefix('_')?.splitn(3, '_');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let arch = it.next().filter(|a| !a.is_empty())?;
    Some(((major, minor), arch.to_string()))
}

/// Holds the wheel `file_name` and what `auditwheel show --json` said of it (`report`) to
/// the promise of the module docs. Returns the wheel's tags, `python-abi-platform`.
///
/// # Errors
/// What breaks the promise: a report that is not auditwheel's JSON, a pure wheel, an
/// external library, a tag that is not abi3 or manylinux, a platform tag more compatible
/// than the one auditwheel found.
pub fn check_report(file_name: &str, report: &str) -> Result<String, String> {
    let tags = wheel_tags(file_name).ok_or_else(|| format!("{file_name} is not a wheel file name"))?;
    let json: serde_json::Value =
        serde_json::from_str(report).map_err(|e| format!("auditwheel's report is not JSON: {e}"))?;
    if json["pure"] != serde_json::Value::Bool(false) {
        return Err(format!("auditwheel finds no extension module in {file_name}"));
    }
    let external = json["external_libs"].as_object().ok_or("auditwheel's report has no `external_libs`")?;
    if !external.is_empty() {
        let names: Vec<&str> = external.keys().map(String::as_str).collect();
        return Err(format!("{file_name} links libraries it does not bundle: {}", names.join(", ")));
    }
    let overall = json["overall_tag"].as_str().ok_or("auditwheel's report has no `overall_tag`")?;
    let (need, arch) =
        manylinux(overall).ok_or_else(|| format!("auditwheel: {file_name} is `{overall}`, not manylinux"))?;
    if tags.abi != ["abi3"] || !tags.python.iter().all(|p| p.starts_with("cp3")) {
        return Err(format!("{file_name} is not a CPython abi3 wheel"));
    }
    for tag in &tags.platform {
        let (glibc, a) =
            manylinux(tag).ok_or_else(|| format!("{file_name}: `{tag}` is not a manylinux tag"))?;
        if a != arch || glibc < need {
            return Err(format!("{file_name} claims `{tag}`, its symbols need `{overall}`"));
        }
    }
    Ok(format!("{}-{}-{}", tags.python.join("."), tags.abi.join("."), tags.platform.join(".")))
}

/// Makes the tools venv (once) with [`TOOL_PINS`]; returns its python. A stamp file of the
/// pins makes a second call install nothing.
fn tools(dir: &Path) -> Result<PathBuf, String> {
    let python = dir.join("bin").join("python");
    if !python.exists() {
        let host = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        if !run_ok(Command::new(&host).args(["-m", "venv"]).arg(dir)) {
            return Err(format!("`{host} -m venv {}` failed", dir.display()));
        }
    }
    let stamp = dir.join("gpubuf-pins.txt");
    let want = TOOL_PINS.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) {
        let mut pip = Command::new(&python);
        pip.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--only-binary",
            ":all:",
        ])
        .args(TOOL_PINS);
        if !run_ok(&mut pip) {
            return Err(format!("pip install {} failed", TOOL_PINS.join(" ")));
        }
        std::fs::write(&stamp, want).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    }
    Ok(python)
}

/// Builds the wheel into `<target>/python-wheels` (emptied first), checks it (module docs)
/// and returns its path.
///
/// # Errors
/// The step that failed: the tools venv, maturin, auditwheel, or the check.
pub fn build() -> Result<PathBuf, String> {
    // Absolute: the MPI module's script and maturin run with paths below it.
    let target = std::path::absolute(target_dir()).unwrap_or_else(|_| target_dir());
    let python = tools(&target.join("wheel-tools"))?;
    let wheels = target.join("python-wheels");
    // Only this build's wheel is left there.
    let _ = std::fs::remove_dir_all(&wheels);
    // The MPI module goes in after auditwheel's check (below), never through maturin.
    let _ = std::fs::remove_file(root().join("crates/gpubuf-python/python").join(crate::wheel_mpi::MODULE));
    let mut maturin = Command::new(&python);
    maturin
        .args(["-m", "maturin", "build", "--release", "--compatibility", "pypi", "--auditwheel", "check"])
        .arg("-m")
        .arg(root().join("crates/gpubuf-python/Cargo.toml"))
        .arg("--out")
        .arg(&wheels)
        .arg("--interpreter")
        .arg(&python)
        .env("CARGO_TARGET_DIR", &target);
    if !run_ok(&mut maturin) {
        return Err("maturin build failed".into());
    }
    let wheel = std::fs::read_dir(&wheels)
        .map_err(|e| format!("reading {}: {e}", wheels.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("no wheel in {}", wheels.display()))?;
    let name = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let report = capture(Command::new(&python).args(["-m", "auditwheel", "show", "--json"]).arg(&wheel))
        .ok_or_else(|| format!("auditwheel show {} failed", wheel.display()))?;
    let tags = check_report(&name, &report)?;
    println!("wheel: {tags}, no external library (auditwheel show)");
    let glibc = wheel_tags(&name)
        .and_then(|t| t.platform.iter().filter_map(|p| manylinux(p)).map(|(g, _)| g).min())
        .ok_or_else(|| format!("{name} has no manylinux tag"))?;
    let so = crate::wheel_mpi::build(&python, &target)?;
    crate::wheel_mpi::add(&python, &wheel, &so, glibc)?;
    println!(
        "wheel: {} added (links the machine's MPI library and the C runtime only)",
        crate::wheel_mpi::MODULE
    );
    Ok(wheel)
}

/// `cargo xtask wheel`: builds and checks the wheel; its path is the last line printed.
pub fn command() -> bool {
    match build() {
        Ok(wheel) => {
            println!("{}", wheel.display());
            true
        }
        Err(e) => {
            eprintln!("wheel: FAILED ({e})");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// auditwheel 6.8's `show --json`, cut to the fields read.
    fn report(overall: &str, external: &str) -> String {
        format!(
            r#"{{"version": 1, "pure": false, "overall_tag": "{overall}", "sym_tag": "{overall}",
               "versioned_symbols": {{"libc.so.6": ["GLIBC_2.34"]}}, "external_libs": {{{external}}}}}"#
        )
    }

    const WHEEL: &str = "gpubuf-0.1.0-cp310-abi3-manylinux_2_34_x86_64.whl";

    #[test]
    fn wheel_names_and_manylinux_tags_are_read() {
        let t = wheel_tags("a-1.0-7-cp310-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl").unwrap();
        assert_eq!(t.python, ["cp310"]);
        assert_eq!(t.abi, ["abi3"]);
        assert_eq!(t.platform, ["manylinux_2_17_x86_64", "manylinux2014_x86_64"]);
        assert_eq!(wheel_tags("gpubuf-0.1.0.tar.gz"), None);
        assert_eq!(wheel_tags("gpubuf-cp310-abi3.whl"), None);
        assert_eq!(manylinux("manylinux_2_34_x86_64"), Some(((2, 34), "x86_64".into())));
        assert_eq!(manylinux("manylinux_2_28_aarch64"), Some(((2, 28), "aarch64".into())));
        assert_eq!(manylinux("manylinux2014_x86_64"), Some(((2, 17), "x86_64".into())));
        assert_eq!(manylinux("manylinux1_i686"), Some(((2, 5), "i686".into())));
        assert_eq!(manylinux("linux_x86_64"), None);
        assert_eq!(manylinux("musllinux_1_2_x86_64"), None);
        assert_eq!(manylinux("manylinux_2_x86_64"), None);
    }

    #[test]
    fn the_wheel_check_holds_to_abi3_manylinux_and_nothing_external() {
        let ok = report("manylinux_2_34_x86_64", "");
        assert_eq!(check_report(WHEEL, &ok), Ok("cp310-abi3-manylinux_2_34_x86_64".into()));
        // A tag stricter than the symbols need is true; a looser one is not.
        assert!(check_report(WHEEL, &report("manylinux_2_28_x86_64", "")).is_ok());
        let e = check_report(WHEEL, &report("manylinux_2_35_x86_64", "")).unwrap_err();
        assert!(e.contains("claims `manylinux_2_34_x86_64`"), "{e}");
        let e = check_report(WHEEL, &report("linux_x86_64", "")).unwrap_err();
        assert!(e.contains("not manylinux"), "{e}");
        let e = check_report(WHEEL, &report("manylinux_2_34_x86_64", r#""libOpenCL.so.1": {}"#)).unwrap_err();
        assert!(e.contains("libOpenCL.so.1"), "{e}");
        let e = check_report("gpubuf-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl", &ok).unwrap_err();
        assert!(e.contains("abi3"), "{e}");
        let e = check_report("gpubuf-0.1.0-cp310-abi3-linux_x86_64.whl", &ok).unwrap_err();
        assert!(e.contains("not a manylinux tag"), "{e}");
        let e = check_report("gpubuf-0.1.0-cp310-abi3-manylinux_2_34_aarch64.whl", &ok).unwrap_err();
        assert!(e.contains("claims"), "{e}");
        assert!(check_report(WHEEL, &ok.replace("\"pure\": false", "\"pure\": true")).is_err());
        assert!(check_report(WHEEL, "gpubuf is consistent with manylinux_2_34").is_err());
    }
}
