//! Running commands.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Runs a command with inherited output; true when it exits 0.
pub fn status_ok(cmd: &mut Command) -> bool {
    cmd.status().map(|s| s.success()).unwrap_or(false)
}

/// Runs a command, printing it first; true when it exits 0.
pub fn run_ok(cmd: &mut Command) -> bool {
    println!("$ {}", describe(cmd));
    status_ok(cmd)
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs a command, echoing its stdout line by line while keeping it; returns the lines
/// and whether it exited 0.
pub fn run_tee(cmd: &mut Command) -> (Vec<String>, bool) {
    println!("$ {}", describe(cmd));
    let Ok(mut child) = cmd.stdout(Stdio::piped()).spawn() else {
        return (Vec::new(), false);
    };
    let mut lines = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            lines.push(line);
        }
    }
    let ok = child.wait().map(|s| s.success()).unwrap_or(false);
    (lines, ok)
}

/// Runs a command and returns its stdout when it exits 0.
pub fn capture(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::inherit()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
