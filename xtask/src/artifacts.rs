//! Finding what cargo built, wherever `CARGO_TARGET_DIR` puts it.

use crate::sh::capture;
use std::path::PathBuf;
use std::process::Command;

/// Builds with `cargo <args> --message-format=json` and returns the executables cargo
/// reported for targets named `name` (the last one wins when several are built).
pub fn build_executable(args: &[&str], name: &str) -> Option<PathBuf> {
    let mut cmd = Command::new("cargo");
    cmd.args(args).arg("--message-format=json");
    let json = capture(&mut cmd)?;
    json.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == name)
        .filter_map(|v| v["executable"].as_str().map(PathBuf::from))
        .next_back()
}
