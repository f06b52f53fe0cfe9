//! Running commands, each within the time limit of the step it belongs to.
//!
//! [`step`] runs a part of `test-all` under a limit: a command of that part still running
//! when the limit is reached is killed with every process it started, and the step is
//! reported as stopped, by name. The processes it started are found as its descendants and
//! by a mark in their environment ([`MARK_ENV`], inherited), so that one whose parent has
//! exited (re-parented away, still holding the output pipe open) is killed too. Commands
//! outside a step have no limit. `GPUBUF_STEP_LIMIT=<seconds>` replaces every step's own
//! limit (to try the mechanism, or to give a slow machine more time).

use std::cell::RefCell;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The step running now on this thread: its name, limit and deadline, and whether one of
/// its commands was stopped.
struct Step {
    name: String,
    limit: Duration,
    deadline: Instant,
    stopped: Arc<AtomicBool>,
}

/// The environment variable that marks every process a command started (see the module
/// docs): `<xtask pid>-<command number>`.
pub const MARK_ENV: &str = "GPUBUF_XTASK_COMMAND";

/// Numbers of the commands spawned.
static COMMANDS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static STEP: RefCell<Option<Step>> = const { RefCell::new(None) };
}

/// The limit of a step whose own limit is `own`: `GPUBUF_STEP_LIMIT` seconds when set.
pub fn limit(own: Duration) -> Duration {
    std::env::var("GPUBUF_STEP_LIMIT")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .map_or(own, Duration::from_secs)
}

/// Runs `f` as the step `name`, limited to `limit` (see the module docs). Returns what `f`
/// returned and, when the step was stopped at its limit, the line that says so.
pub fn step<R>(name: &str, limit: Duration, f: impl FnOnce() -> R) -> (R, Option<String>) {
    let step = Step {
        name: name.to_string(),
        limit,
        deadline: Instant::now() + limit,
        stopped: Arc::new(AtomicBool::new(false)),
    };
    STEP.with(|s| *s.borrow_mut() = Some(step));
    let r = f();
    let step = STEP.with(|s| s.borrow_mut().take());
    let stopped = step.filter(|s| s.stopped.load(Ordering::SeqCst)).map(|s| {
        format!("{}: FAILED (stopped: still running after its limit of {} s)", s.name, s.limit.as_secs())
    });
    (r, stopped)
}

/// Stops the command `pid` of the current step once the step's deadline passes, unless
/// dropped first (the command ended).
struct Watch {
    done: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    fn start(pid: u32, mark: String, what: String) -> Watch {
        let step =
            STEP.with(|s| s.borrow().as_ref().map(|s| (s.deadline, s.name.clone(), s.stopped.clone())));
        let Some((deadline, name, stopped)) = step else {
            return Watch { done: None, thread: None };
        };
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let wait = deadline.saturating_duration_since(Instant::now());
            if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(wait) {
                stopped.store(true, Ordering::SeqCst);
                eprintln!("xtask: step `{name}` reached its time limit: stopping `{what}`");
                kill_tree(pid, &mark);
            }
        });
        Watch { done: Some(tx), thread: Some(thread) }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The parent of every process, from `/proc/<pid>/stat`.
fn parents() -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid = after.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// The processes whose environment holds `MARK_ENV=mark`.
fn marked(mark: &str) -> Vec<u32> {
    let entry = format!("{MARK_ENV}={mark}");
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == entry.as_bytes()))
        })
        .collect()
}

/// `root`, every process below it, and every process marked `mark` and those below them.
fn tree(root: u32, mark: &str) -> Vec<u32> {
    let parents = parents();
    let mut all = vec![root];
    all.extend(marked(mark).into_iter().filter(|&p| p != root));
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        all.extend(parents.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    all
}

fn signal(pids: &[u32], sig: libc::c_int) {
    for &p in pids {
        let Ok(p) = libc::pid_t::try_from(p) else { continue };
        // SAFETY: kill(2) has no memory-safety preconditions; a pid that is gone gives ESRCH.
        unsafe { libc::kill(p, sig) };
    }
}

/// Stops `root`, its descendants and the processes marked `mark`: stops (SIGSTOP) every
/// process of the tree, again until no new one appears (a stopped process starts no other,
/// so none escapes by being re-parented while this runs), then kills them all (SIGKILL).
fn kill_tree(root: u32, mark: &str) {
    let mut all: Vec<u32> = Vec::new();
    for _ in 0..100 {
        let now = tree(root, mark);
        let new: Vec<u32> = now.into_iter().filter(|p| !all.contains(p)).collect();
        if new.is_empty() {
            break;
        }
        signal(&new, libc::SIGSTOP);
        all.extend(new);
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&all, libc::SIGKILL);
}

#[cfg(test)]
/// Whether `pid` exists and has not exited (a zombie has exited).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
        .is_some_and(|zombie| !zombie)
}

/// Spawns `cmd`, watched by the current step's limit.
fn spawn(cmd: &mut Command) -> Option<(Child, Watch)> {
    let mark = format!("{}-{}", std::process::id(), COMMANDS.fetch_add(1, Ordering::Relaxed));
    cmd.env(MARK_ENV, &mark);
    let child = cmd.spawn().ok()?;
    let watch = Watch::start(child.id(), mark, describe(cmd));
    Some((child, watch))
}

/// Runs a command with inherited output; true when it exits 0.
pub fn status_ok(cmd: &mut Command) -> bool {
    let Some((mut child, _watch)) = spawn(cmd) else { return false };
    child.wait().map(|s| s.success()).unwrap_or(false)
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

/// A pipe (read end, write end), both close-on-exec.
fn pipe() -> Option<(File, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: pipe2 succeeded: both descriptors are open and owned by nobody else.
    Some(unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Runs a command with its stdout and stderr merged in order, echoing each line while
/// keeping it (undecodable bytes replaced); returns the lines and whether it exited 0. A
/// command stopped at its step's limit returns what it printed so far and `false`.
pub fn run_tee(cmd: &mut Command) -> (Vec<String>, bool) {
    println!("$ {}", describe(cmd));
    let Some((read, write)) = pipe() else { return (Vec::new(), false) };
    let Ok(write2) = write.try_clone() else { return (Vec::new(), false) };
    cmd.stdout(Stdio::from(write)).stderr(Stdio::from(write2));
    let spawned = spawn(cmd);
    // The command holds the write ends it was given; ours close here, so the read end
    // sees the end of the output when the command and its children are done.
    cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
    let Some((mut child, watch)) = spawned else { return (Vec::new(), false) };
    let mut lines = Vec::new();
    let mut reader = BufReader::new(read);
    let mut buf = Vec::new();
    while matches!(reader.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
        let line = String::from_utf8_lossy(&buf).trim_end_matches(['\n', '\r']).to_string();
        println!("{line}");
        lines.push(line);
        buf.clear();
    }
    let ok = child.wait().map(|s| s.success()).unwrap_or(false);
    drop(watch);
    (lines, ok)
}

/// Runs a command and returns its stdout when it exits 0.
pub fn capture(cmd: &mut Command) -> Option<String> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let (mut child, watch) = spawn(cmd)?;
    let mut out = Vec::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_end(&mut out);
    }
    let ok = child.wait().map(|s| s.success()).unwrap_or(false);
    drop(watch);
    ok.then(|| String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_hung_step_is_stopped_with_its_children_and_named() {
        let pidfile = std::env::temp_dir().join(format!("xtask-hang-{}", std::process::id()));
        let script =
            format!("sleep 300 & echo $! > {}; echo started; sleep 300; echo never", pidfile.display());
        let t = Instant::now();
        let ((lines, ok), stopped) = step("hang", Duration::from_secs(1), || run_tee(&mut sh(&script)));
        assert!(t.elapsed() < Duration::from_secs(30), "took {:?}", t.elapsed());
        assert!(!ok);
        assert_eq!(lines, ["started"]);
        let msg = stopped.expect("the step is reported as stopped");
        assert!(msg.starts_with("hang: FAILED") && msg.contains("limit of 1 s"), "{msg}");
        let grandchild: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        let _ = std::fs::remove_file(&pidfile);
        std::thread::sleep(Duration::from_millis(200));
        assert!(!alive(grandchild), "the background sleep {grandchild} outlived the step");
        // The next step starts with a fresh limit.
        let ((lines, ok), stopped) = step("quick", Duration::from_secs(60), || run_tee(&mut sh("echo hi")));
        assert!(ok && stopped.is_none());
        assert_eq!(lines, ["hi"]);
    }

    #[test]
    fn a_grandchild_left_behind_by_a_finished_command_is_stopped_too() {
        // The shell exits at once; its background sleep, re-parented away from it, keeps
        // the output pipe open, so reading waits for it until the limit stops it.
        let pidfile = std::env::temp_dir().join(format!("xtask-orphan-{}", std::process::id()));
        let script = format!("sleep 20 & echo $! > {}; echo started", pidfile.display());
        let t = Instant::now();
        let ((lines, _), stopped) = step("orphan", Duration::from_secs(1), || run_tee(&mut sh(&script)));
        let took = t.elapsed();
        let orphan: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        let _ = std::fs::remove_file(&pidfile);
        let left = alive(orphan);
        if left {
            signal(&[orphan], libc::SIGKILL);
        }
        assert!(took < Duration::from_secs(10), "took {took:?}");
        assert_eq!(lines, ["started"]);
        assert!(stopped.is_some_and(|m| m.starts_with("orphan: FAILED")));
        std::thread::sleep(Duration::from_millis(200));
        assert!(!left || !alive(orphan), "the orphaned sleep {orphan} outlived the step");
    }

    #[test]
    fn every_kind_of_command_is_limited() {
        let t = Instant::now();
        let (r, stopped) = step("s", Duration::from_millis(300), || {
            (status_ok(&mut sh("sleep 300")), capture(&mut sh("echo x; sleep 300")))
        });
        assert!(t.elapsed() < Duration::from_secs(30), "took {:?}", t.elapsed());
        assert_eq!(r, (false, None));
        assert!(stopped.is_some());
    }

    #[test]
    fn stderr_is_kept_in_order_and_bad_utf8_does_not_stop_reading() {
        let (lines, ok) = run_tee(&mut sh("echo a; echo b >&2; printf 'c\\377\\n'; echo d; exit 3"));
        assert!(!ok);
        assert_eq!(lines, ["a", "b", "c\u{fffd}", "d"]);
    }
}
