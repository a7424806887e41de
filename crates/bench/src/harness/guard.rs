//! Nothing of a bench run outlives it: [`RunGuard`] removes the run's
//! namespaces (killing every process inside them) and its work directory
//! when it is dropped, and a watchdog process does the same if the bench
//! process dies without dropping it (Ctrl-C, `kill -9`, abort): the
//! watchdog waits on a pipe that only the bench holds open, and cleans up
//! when the pipe closes. [`Proc`] is one child process (a device under
//! test, a peer), killed when dropped.
//!
//! Every process a bench starts runs inside one of its namespaces (`ip
//! netns exec`), so removing the namespaces kills them all.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use anyhow::{bail, Context as _, Result};

/// The watchdog: `$1` namespace-name prefix, `$2` work directory. Runs
/// when its standard input closes (the bench ended, however it ended).
const WATCHDOG: &str = r#"read -r _ || true
for ns in $(ip netns list 2>/dev/null | cut -d' ' -f1); do
  case "$ns" in
    "$1"*)
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
      ip netns del "$ns" 2>/dev/null ;;
  esac
done
[ -n "$2" ] && rm -rf -- "$2"
exit 0"#;

/// A bench run's namespaces (every one whose name starts with a prefix)
/// and work directory, removed when dropped or when the process dies.
#[derive(Debug)]
pub struct RunGuard {
    ns_prefix: String,
    work: PathBuf,
    watchdog: Option<(Child, ChildStdin)>,
}

impl RunGuard {
    /// Removes what an earlier run with this prefix left, creates `work`
    /// and starts the watchdog. `ns_prefix` must be specific to the bench
    /// (every namespace starting with it belongs to the run).
    pub fn new(ns_prefix: &str, work: PathBuf) -> Result<Self> {
        if ns_prefix.is_empty() {
            bail!("a bench run needs a namespace prefix");
        }
        lab::netns::cleanup(ns_prefix);
        std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        let watchdog = Self::watchdog(ns_prefix, &work);
        Ok(RunGuard { ns_prefix: ns_prefix.to_owned(), work, watchdog })
    }

    fn watchdog(ns_prefix: &str, work: &Path) -> Option<(Child, ChildStdin)> {
        use std::os::unix::process::CommandExt as _;
        let mut c = Command::new("sh");
        c.args(["-c", WATCHDOG, "v6gate-bench-watchdog", ns_prefix])
            .arg(work)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: Ctrl-C in the terminal stops the
            // bench, not the watchdog that cleans up after it.
            .process_group(0);
        match c.spawn() {
            Ok(mut child) => {
                let stdin = child.stdin.take()?;
                Some((child, stdin))
            }
            Err(e) => {
                eprintln!("bench: no watchdog ({e}): an interrupted run leaves its namespaces");
                None
            }
        }
    }

    /// The run's work directory (generated configurations, logs).
    pub fn work(&self) -> &Path {
        &self.work
    }

    /// The namespace-name prefix of the run.
    pub fn ns_prefix(&self) -> &str {
        &self.ns_prefix
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        lab::netns::cleanup(&self.ns_prefix);
        let _ = std::fs::remove_dir_all(&self.work);
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin); // the watchdog finds nothing left and exits
            let _ = child.wait();
        }
    }
}

/// A child process (device under test, peer), killed when dropped. Its
/// output goes to a log file, whose end error messages quote.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    what: String,
    log: Option<PathBuf>,
}

impl Proc {
    /// Spawns `cmd` with stdin closed and stdout/stderr into `log` (or
    /// discarded).
    pub fn spawn(what: &str, mut cmd: Command, log: Option<&Path>) -> Result<Proc> {
        cmd.stdin(Stdio::null());
        match log {
            Some(p) => {
                let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
                cmd.stdout(f.try_clone()?).stderr(f);
            }
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        let child = cmd.spawn().with_context(|| format!("starting {what}"))?;
        Ok(Proc { child, what: what.to_owned(), log: log.map(Path::to_path_buf) })
    }

    /// Fails (quoting the log's end) when the process has exited.
    pub fn alive(&mut self) -> Result<()> {
        if let Some(st) = self.child.try_wait()? {
            bail!("{} exited ({st}){}", self.what, self.log_note());
        }
        Ok(())
    }

    /// Waits up to `t` for the process to exit; whether it exited with
    /// status 0 (false, and killed, when it was still running at `t`).
    pub fn wait_exit(&mut self, t: std::time::Duration) -> Result<bool> {
        let end = std::time::Instant::now() + t;
        loop {
            if let Some(st) = self.child.try_wait()? {
                return Ok(st.success());
            }
            if std::time::Instant::now() > end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// [`Proc::wait_exit`], measuring meanwhile the peak rate of growing
    /// counts `sample()` (seconds, e.g. [`pid_cpu_demand`] of some
    /// processes): the most any of them grew per second over any `window`
    /// while this process ran.
    pub fn wait_exit_peak(
        &mut self,
        t: std::time::Duration,
        window: std::time::Duration,
        sample: impl Fn() -> Vec<f64>,
    ) -> Result<(bool, f64)> {
        let now = std::time::Instant::now;
        let end = now() + t;
        let (mut peak, mut last, mut at) = (0.0f64, sample(), now());
        while self.running() && now() < end {
            std::thread::sleep(window.min(end.saturating_duration_since(now())));
            // A window in which the process exited is not a whole one.
            if !self.running() {
                break;
            }
            let (v, v_at) = (sample(), now());
            let secs = v_at.duration_since(at).as_secs_f64().max(1e-3);
            peak = v.iter().zip(&last).map(|(v, l)| (v - l) / secs).fold(peak, f64::max);
            (last, at) = (v, v_at);
        }
        Ok((self.wait_exit(end.saturating_duration_since(now()))?, peak))
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The whole log (empty without one).
    pub fn log(&self) -> String {
        self.log.as_ref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default()
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of the log.
    pub fn log_tail(&self) -> String {
        let s = self.log.as_ref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// `":\n"` and the log's tail when the log has anything, else `""`.
    pub fn log_note(&self) -> String {
        let t = self.log_tail();
        if t.trim().is_empty() {
            String::new()
        } else {
            format!(":\n{t}")
        }
    }

    /// CPU time (user + system) the process has used, seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        pid_cpu_seconds(self.child.id())
    }
}

/// CPU seconds (user + system) process `pid` has used so far.
pub fn pid_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the name.
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100).max(1);
    Some(ticks as f64 / hz as f64)
}

/// Seconds process `pid`'s main thread has run or waited to run (on a
/// CPU, or runnable on a run queue: `/proc/PID/schedstat`): what it asked
/// of the CPUs, whether it got them or other work held them.
pub fn pid_cpu_demand(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((f.next()?? + f.next()??) as f64 / 1e9)
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_reports_its_exit_with_the_log_and_is_killed_on_drop() {
        let dir = std::env::temp_dir().join(lab::netns::unique_name("v6gate-bench-proc"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = Command::new("sh");
        c.args(["-c", "echo started; echo broken config >&2; exit 3"]);
        let mut p = Proc::spawn("dut", c, Some(&dir.join("dut.log"))).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let e = p.alive().unwrap_err().to_string();
        assert!(e.starts_with("dut exited") && e.contains("broken config"), "{e}");
        let mut s = Command::new("sleep");
        s.arg("60");
        let mut p = Proc::spawn("sleeper", s, None).unwrap();
        p.alive().unwrap();
        assert!(p.running());
        let mut q = Proc::spawn("true", Command::new("true"), None).unwrap();
        assert!(q.wait_exit(std::time::Duration::from_secs(5)).unwrap(), "exit status 0");
        let mut r = Proc::spawn(
            "sleep",
            {
                let mut c = Command::new("sleep");
                c.arg("60");
                c
            },
            None,
        )
        .unwrap();
        assert!(!r.wait_exit(std::time::Duration::from_millis(50)).unwrap(), "killed at the deadline");
        assert!(!r.running());
        assert!(p.cpu_seconds().is_some());
        let pid = p.child.id();
        drop(p);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "killed and reaped");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn waiting_measures_the_peak_cpu_demand() {
        let spawn = |script: &str| {
            let mut c = Command::new("sh");
            c.args(["-c", script]);
            Proc::spawn("sh", c, None).unwrap()
        };
        let window = std::time::Duration::from_millis(100);
        // A spinning shell asks for a whole CPU (running or waiting for
        // it, however busy the machine), a sleeping one for almost none.
        let mut spin = spawn("while :; do :; done");
        let pid = spin.id();
        let demand = || vec![pid_cpu_demand(pid).unwrap_or(0.0)];
        let (ok, busy) = spin.wait_exit_peak(std::time::Duration::from_millis(600), window, demand).unwrap();
        assert!(!ok && !spin.running(), "killed at the deadline");
        assert!(busy > 0.5, "{busy}");
        let mut sleeper = spawn("sleep 0.5; exit 0");
        let pid = sleeper.id();
        let demand = || vec![pid_cpu_demand(pid).unwrap_or(0.0)];
        let (ok, quiet) = sleeper.wait_exit_peak(std::time::Duration::from_secs(5), window, demand).unwrap();
        assert!(ok, "exit status 0");
        assert!(quiet < busy, "{quiet} vs {busy}");
        assert_eq!(pid_cpu_demand(u32::MAX), None);
    }

    #[test]
    fn watchdog_cleans_up_when_the_bench_dies() {
        assert!(lab::netns::am_root(), "network-namespace tests need root (CI runs as root)");
        let prefix = lab::netns::unique_name("v6bg");
        let work = std::env::temp_dir().join(format!("{prefix}-work"));
        let g = RunGuard::new(&format!("{prefix}-"), work.clone()).unwrap();
        let ns = lab::netns::Netns::create(&format!("{prefix}-x")).unwrap().keep();
        let mut sleeper = lab::netns::Netns::attach(&ns).command("sleep").arg("60").spawn().unwrap();
        // A bench process that dies without dropping its guard: only the
        // watchdog is left to clean up once its pipe closes.
        let mut g = g;
        let (mut child, stdin) = g.watchdog.take().expect("sh runs the watchdog");
        std::mem::forget(g);
        drop(stdin);
        child.wait().unwrap();
        assert!(!lab::netns::exists(&ns), "namespace removed");
        assert!(!work.exists(), "work directory removed");
        assert!(!sleeper.wait().unwrap().success(), "the process inside was killed");
    }
}
