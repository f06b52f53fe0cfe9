//! The MPI module of the wheel, `gpubuf/_mpi.abi3.so` (crate `gpubuf-python-mpi`, the
//! native half of `gpubuf.mpi`).
//!
//! maturin builds one extension module a wheel, so this one is built by a second maturin
//! run after the first built the rest, then added to the wheel with its line in the
//! wheel's `RECORD`. auditwheel
//! has already tagged the wheel from the module maturin built; this module links the MPI
//! library of the machine (Open MPI's `libmpi.so.40`, as mpi4py does), which a wheel must
//! not bundle (it has to be the MPI that `mpirun` runs), so it is held to a promise of its
//! own ([`check_module`]): besides the MPI library only the C runtime, and glibc symbols no
//! newer than the wheel's manylinux tag allows. `import gpubuf` never loads it; `import
//! gpubuf.mpi` does, and says so when the MPI library is missing.

use crate::sh::{capture, run_ok};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The module's path in the wheel.
pub const MODULE: &str = "gpubuf/_mpi.abi3.so";

/// The libraries the module may link: the MPI library and the C runtime.
pub const ALLOWED: [&str; 8] = [
    "libmpi.so.40",
    "libc.so.6",
    "libm.so.6",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
];

/// Adds `argv[2]` to the wheel `argv[1]` as `argv[3]` (replacing the RECORD line), then
/// prints the module's `DT_NEEDED` libraries and the newest glibc symbol version it needs.
const ADD: &str = r#"
import base64, hashlib, os, sys, zipfile
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

whl, so, arc = sys.argv[1:4]
data = open(so, "rb").read()
digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
tmp = whl + ".tmp"
with zipfile.ZipFile(whl) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
    record = None
    for info in zin.infolist():
        if info.filename == arc:
            continue
        if info.filename.endswith(".dist-info/RECORD"):
            record = info
            continue
        zout.writestr(info, zin.read(info.filename))
    lines = [l for l in zin.read(record.filename).decode().splitlines() if l and not l.startswith(arc + ",")]
    module = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
    module.external_attr = 0o755 << 16
    module.compress_type = zipfile.ZIP_DEFLATED
    zout.writestr(module, data)
    lines.append(f"{arc},sha256={digest},{len(data)}")
    zout.writestr(record, "\n".join(lines) + "\n")
os.replace(tmp, whl)
with open(so, "rb") as f:
    elf = ELFFile(f)
    needed = [t.needed for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    newest = (0, 0)
    for s in elf.iter_sections():
        if isinstance(s, GNUVerNeedSection):
            for _, auxes in s.iter_versions():
                for aux in auxes:
                    if aux.name.startswith("GLIBC_"):
                        v = tuple(int(p) for p in aux.name[6:].split(".")[:2])
                        newest = max(newest, v + (0,) * (2 - len(v)))
print("needed", " ".join(needed))
print("glibc", "%d.%d" % newest)
"#;

/// Builds the module (release) with maturin and `python`, as the main module is built
/// (the same settings, so PyO3 is compiled once for both); returns the built library.
/// maturin's own wheel of it (`<target>/python-wheels-mpi`) is not used.
///
/// # Errors
/// When maturin fails (no MPI library or headers, say: `cargo xtask install-deps`).
pub fn build(python: &Path, target: &Path) -> Result<PathBuf, String> {
    let mut maturin = Command::new(python);
    maturin
        .args(["-m", "maturin", "build", "--release", "--auditwheel", "skip", "--compatibility", "linux"])
        .arg("-m")
        .arg(crate::wheel::root().join("crates/gpubuf-python-mpi/Cargo.toml"))
        .arg("--out")
        .arg(target.join("python-wheels-mpi"))
        .arg("--interpreter")
        .arg(python)
        .env("CARGO_TARGET_DIR", target);
    if !run_ok(&mut maturin) {
        return Err("building gpubuf._mpi (crate gpubuf-python-mpi) failed: it needs Open MPI \
                    (cargo xtask install-deps)"
            .into());
    }
    Ok(target.join("release").join("lib_mpi.so"))
}

/// Adds the module at `so` to `wheel` and checks it against the wheel's glibc `tag`
/// (`(major, minor)` of its manylinux tag).
///
/// # Errors
/// When the script fails or [`check_module`] refuses the module.
pub fn add(python: &Path, wheel: &Path, so: &Path, tag: (u32, u32)) -> Result<(), String> {
    let out = capture(Command::new(python).args(["-c", ADD]).arg(wheel).arg(so).arg(MODULE))
        .ok_or_else(|| format!("adding {MODULE} to {} failed", wheel.display()))?;
    check_module(&out, tag)
}

/// Holds the module to its promise, from the script's two lines (`needed <libs>`,
/// `glibc <major.minor>`): no library outside [`ALLOWED`], the MPI library among them,
/// and no glibc symbol newer than `tag`.
///
/// # Errors
/// What breaks it.
pub fn check_module(report: &str, tag: (u32, u32)) -> Result<(), String> {
    let field = |name: &str| {
        report.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')).map(str::trim))
    };
    let needed = field("needed").ok_or("no `needed` line in the module's report")?;
    let libs: Vec<&str> = needed.split_whitespace().collect();
    if let Some(bad) = libs.iter().find(|l| !ALLOWED.contains(l)) {
        return Err(format!("{MODULE} links {bad}, beyond the MPI library and the C runtime"));
    }
    if !libs.contains(&"libmpi.so.40") {
        return Err(format!("{MODULE} does not link the MPI library (libmpi.so.40)"));
    }
    let glibc = field("glibc").ok_or("no `glibc` line in the module's report")?;
    let (major, minor) = glibc.split_once('.').ok_or_else(|| format!("glibc version `{glibc}`"))?;
    let v: (u32, u32) = (
        major.parse().map_err(|_| format!("glibc version `{glibc}`"))?,
        minor.parse().map_err(|_| format!("glibc version `{glibc}`"))?,
    );
    if v > tag {
        return Err(format!(
            "{MODULE} needs glibc {}.{}, newer than the wheel's manylinux_{}_{}",
            v.0, v.1, tag.0, tag.1
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mpi_module_links_mpi_and_the_c_runtime_only() {
        let ok = "needed libmpi.so.40 libgcc_s.so.1 libm.so.6 libc.so.6\nglibc 2.34\n";
        assert_eq!(check_module(ok, (2, 34)), Ok(()));
        assert_eq!(check_module(ok, (2, 35)), Ok(()));
        let e = check_module(ok, (2, 28)).unwrap_err();
        assert!(e.contains("glibc 2.34"), "{e}");
        let e = check_module("needed libmpi.so.40 libpython3.11.so.1.0\nglibc 2.17", (2, 34)).unwrap_err();
        assert!(e.contains("libpython3.11"), "{e}");
        let e = check_module("needed libc.so.6\nglibc 2.17", (2, 34)).unwrap_err();
        assert!(e.contains("does not link the MPI library"), "{e}");
        assert!(check_module("glibc 2.17", (2, 34)).is_err());
        assert!(check_module("needed libmpi.so.40\nglibc two", (2, 34)).is_err());
    }
}
