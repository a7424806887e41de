//! Named network namespaces, veth pairs and commands inside namespaces.
//!
//! A [`Netns`] is created with a unique name (see [`unique_name`]) and
//! deleted when dropped, killing every process still inside it first, so a
//! failing test or an aborted benchmark leaves nothing behind. [`cleanup`]
//! removes every namespace with a given prefix, for the case where the
//! owning process itself was killed.

use std::fs::File;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context as _, Result};
use nix::sched::{setns, CloneFlags};

/// Directory where iproute2 keeps the namespace handles.
pub const NETNS_DIR: &str = "/run/netns";

/// A name `<prefix>-<pid>-<n>` unique on this machine for this process.
/// Linux limits interface names to 15 bytes, namespace names are not
/// limited, but keep prefixes short so derived veth names fit.
pub fn unique_name(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Runs `cmd args...` and fails with its stderr when it exits non-zero.
pub fn run(cmd: &str, args: &[&str]) -> Result<Output> {
    let out =
        Command::new(cmd).args(args).stdin(Stdio::null()).output().with_context(|| format!("cannot run {cmd}"))?;
    if !out.status.success() {
        bail!("`{cmd} {}` failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(out)
}

/// A network namespace, deleted (with every process inside killed) on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
    keep: bool,
}

impl Netns {
    /// Creates the namespace `name` (removing a stale one of that name
    /// first) and brings its loopback up.
    pub fn create(name: &str) -> Result<Self> {
        if crate::testenv::check_tier() {
            // The tier's promise, kept also for a test that forgot its
            // `lab::need_root!()` and runs as root.
            bail!(
                "{name}: {}=check creates no network namespace (a test that needs one starts with lab::need_root!())",
                crate::testenv::TIER_VAR
            );
        }
        if exists(name) {
            delete(name);
        }
        run("ip", &["netns", "add", name])?;
        let ns = Netns { name: name.to_owned(), keep: false };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Creates a namespace with a [`unique_name`] built from `prefix`.
    pub fn unique(prefix: &str) -> Result<Self> {
        Self::create(&unique_name(prefix))
    }

    /// A handle to an existing namespace that is left alone on drop (for
    /// threads and commands that work inside a namespace someone else owns).
    pub fn attach(name: &str) -> Self {
        Netns { name: name.to_owned(), keep: true }
    }

    /// Keeps the namespace when this handle is dropped, returning the handle.
    pub fn keep_handle(mut self) -> Self {
        self.keep = true;
        self
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keep the namespace when this handle is dropped (`v6gate lab up`).
    pub fn keep(mut self) -> String {
        self.keep = true;
        self.name.clone()
    }

    /// `ip <args>` inside the namespace.
    pub fn ip(&self, args: &[&str]) -> Result<Output> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Runs a command inside the namespace and waits for it; fails when it
    /// exits non-zero.
    pub fn exec(&self, cmd: &str, args: &[&str]) -> Result<Output> {
        let mut full = vec!["netns", "exec", self.name.as_str(), cmd];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// A [`Command`] that runs `cmd` inside the namespace, for the caller to
    /// configure and spawn (a daemon, a load generator, ...).
    pub fn command(&self, cmd: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.name.as_str(), cmd]);
        c
    }

    /// Sets a sysctl inside the namespace, e.g. `net.ipv6.conf.all.forwarding`.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        self.exec("sysctl", &["-qw", &format!("{key}={value}")]).map(|_| ())
    }

    /// Moves the calling thread into this namespace. Sockets the thread opens
    /// afterwards belong to it. Use on a dedicated thread: there is no way
    /// back except [`Netns::enter_thread`] on another namespace's handle.
    pub fn enter_thread(&self) -> Result<()> {
        let f = File::open(format!("{NETNS_DIR}/{}", self.name))
            .with_context(|| format!("cannot open namespace {}", self.name))?;
        setns(f, CloneFlags::CLONE_NEWNET).with_context(|| format!("setns into {}", self.name))?;
        Ok(())
    }

    /// Runs `f` on a new thread inside this namespace and returns its
    /// result (sockets `f` opens belong to the namespace and stay there).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter_thread()?;
                f()
            })
            .join()
            .map_err(|_| anyhow::anyhow!("thread inside {} panicked", self.name))?
        })
    }

    /// How many sockets listen on UDP `port` in the namespace (any address).
    pub fn udp_listeners(&self, port: u16) -> usize {
        let out = self.exec("ss", &["-Hlun"]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        out.unwrap_or_default().lines().filter(|l| l.contains(&format!(":{port} "))).count()
    }

    /// Process ids of everything running in the namespace.
    pub fn pids(&self) -> Vec<i32> {
        pids(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if !self.keep {
            delete(&self.name);
        }
    }
}

/// Whether a namespace of that name exists.
pub fn exists(name: &str) -> bool {
    std::path::Path::new(NETNS_DIR).join(name).exists()
}

fn pids(name: &str) -> Vec<i32> {
    Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// Kills every process inside the namespace, then deletes it. Best effort:
/// never fails, because it runs from `Drop` and from cleanup paths.
pub fn delete(name: &str) {
    for pid in pids(name) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    // A killed process can take a moment to leave the namespace; `ip netns
    // del` succeeds regardless (the namespace dies with its last user).
    let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
}

/// Deletes every namespace whose name starts with `prefix`; returns their
/// names. For `v6gate lab down` and for tests that start by clearing what a
/// crashed earlier run left behind.
pub fn cleanup(prefix: &str) -> Vec<String> {
    let mut gone = Vec::new();
    if let Ok(dir) = std::fs::read_dir(NETNS_DIR) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(prefix) {
                delete(&name);
                gone.push(name);
            }
        }
    }
    gone
}

/// Removes every namespace whose name starts with `<prefix>-` (and every
/// process inside) when dropped: for tests and tools that build their
/// namespaces under one prefix and must leave none behind, also when they
/// fail or panic.
#[derive(Debug)]
pub struct PrefixGuard(pub String);

impl Drop for PrefixGuard {
    fn drop(&mut self) {
        cleanup(&format!("{}-", self.0));
    }
}

/// Runs `f` on a thread inside `ns` (see [`Netns::run`]).
pub fn in_netns<T: Send>(ns: &Netns, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    ns.run(f)
}

/// Connects two namespaces with a veth pair: `a_if` in `a`, `b_if` in `b`,
/// both up. Interface names must be at most 15 bytes.
pub fn veth(a: &Netns, a_if: &str, b: &Netns, b_if: &str) -> Result<()> {
    if a_if.len() > 15 || b_if.len() > 15 {
        bail!("interface names must be at most 15 bytes: {a_if}, {b_if}");
    }
    run("ip", &["link", "add", a_if, "netns", a.name(), "type", "veth", "peer", "name", b_if, "netns", b.name()])?;
    a.ip(&["link", "set", a_if, "up"])?;
    b.ip(&["link", "set", b_if, "up"])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_differ() {
        assert_ne!(unique_name("t"), unique_name("t"));
    }

    #[test]
    fn namespace_is_removed_on_drop_and_veth_carries_pings() {
        crate::need_root!();
        let a = Netns::unique("v6l-a").unwrap();
        let b = Netns::unique("v6l-b").unwrap();
        let names = (a.name().to_owned(), b.name().to_owned());
        veth(&a, "va", &b, "vb").unwrap();
        a.ip(&["addr", "add", "192.0.2.1/24", "dev", "va"]).unwrap();
        b.ip(&["addr", "add", "192.0.2.2/24", "dev", "vb"]).unwrap();
        a.exec("ping", &["-c1", "-W2", "192.0.2.2"]).unwrap();
        assert!(exists(&names.0) && exists(&names.1));
        drop(a);
        drop(b);
        assert!(!exists(&names.0) && !exists(&names.1));
    }

    #[test]
    fn cleanup_removes_by_prefix_and_kills_processes() {
        crate::need_root!();
        let prefix = unique_name("v6l-c");
        let ns = Netns::create(&format!("{prefix}-x")).unwrap().keep();
        let mut child = Netns { name: ns.clone(), keep: true }.command("sleep").arg("60").spawn().unwrap();
        // Wait until the sleeper is inside the namespace.
        for _ in 0..50 {
            if !pids(&ns).is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(cleanup(&prefix), vec![ns.clone()]);
        assert!(!exists(&ns));
        let status = child.wait().unwrap();
        assert!(!status.success(), "the process inside was killed");
    }
}
