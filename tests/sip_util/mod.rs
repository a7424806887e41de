//! Shared by the SIP interop tests (`trgw_kamailio`, `alg_interop`): a
//! test directory removed afterwards, RTP sniffers
//! in a namespace, waiting for a UDP listener, and reading SIPp's message
//! log. Child processes are `bench::harness::guard::Proc` (killed on drop).
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bench::harness::guard::Proc;
use lab::netns::{in_netns, Netns};

/// Where Debian installs Kamailio's modules.
pub const KAMAILIO_MODULES: &str = "/usr/lib/x86_64-linux-gnu/kamailio/modules/";

/// A test's directory for configurations and logs, removed however the
/// test ends (set V6GATE_KEEP_TEST_LOGS to keep it; failure messages
/// already carry the log tails).
pub struct TestDir(pub PathBuf);

impl TestDir {
    /// A new directory under the system's temporary directory.
    pub fn new(prefix: &str) -> TestDir {
        let d = std::env::temp_dir().join(lab::netns::unique_name(prefix));
        std::fs::create_dir_all(&d).unwrap();
        TestDir(d)
    }

    /// A path inside it.
    pub fn join(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }

    /// The last 40 lines of each of `files` (those that exist).
    pub fn tails(&self, files: &[&str]) -> String {
        let mut s = String::new();
        for f in files {
            let Ok(text) = std::fs::read_to_string(self.0.join(f)) else { continue };
            let lines: Vec<&str> = text.lines().collect();
            s += &format!("\n--- {f} (last 40 lines):\n{}", lines[lines.len().saturating_sub(40)..].join("\n"));
        }
        s
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::env::var_os("V6GATE_KEEP_TEST_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            eprintln!("test logs kept in {}", self.0.display());
        }
    }
}

/// Starts `cmd` with its output in `log` (the test fails when it cannot).
pub fn spawn(what: &str, cmd: Command, log: &Path) -> Proc {
    Proc::spawn(what, cmd, Some(log)).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Counts UDP datagrams from `from` (not SIP: source port other than
/// 5060) arriving in the namespace, with a raw socket, until `stop`.
pub fn sniff(ns: &Netns, from: IpAddr, count: &AtomicU64, stop: &AtomicBool) {
    sniff_to(ns, from, None, count, stop)
}

/// As [`sniff`], only datagrams to `to_port` when given.
pub fn sniff_to(ns: &Netns, from: IpAddr, to_port: Option<u16>, count: &AtomicU64, stop: &AtomicBool) {
    let (dom, hdr) = match from {
        IpAddr::V4(_) => (socket2::Domain::IPV4, 20usize),
        IpAddr::V6(_) => (socket2::Domain::IPV6, 0usize),
    };
    let sock = in_netns(ns, || Ok(socket2::Socket::new(dom, socket2::Type::RAW, Some(socket2::Protocol::UDP))?))
        .expect("raw socket");
    sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, src)) = sock.recv_from(&mut buf) {
            // SAFETY: recv_from initialised the first n bytes.
            let b: Vec<u8> = buf[..n].iter().map(|x| unsafe { x.assume_init() }).collect();
            let port = |at: usize| b.get(hdr + at..hdr + at + 2).map(|p| u16::from_be_bytes([p[0], p[1]]));
            let (sport, dport) = (port(0), port(2));
            if src.as_socket().map(|s| s.ip()) == Some(from)
                && sport.is_some_and(|p| p != 5060)
                && to_port.is_none_or(|t| dport == Some(t))
            {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Sets an [`AtomicBool`] when dropped (stops the sniffers however a
/// scope ends).
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Waits until `want` sockets listen on UDP `port` in `ns` (10 s).
pub fn wait_udp_listen(ns: &Netns, port: u16, want: usize, what: &Proc) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if ns.udp_listeners(port) >= want {
            return;
        }
        assert!(Instant::now() < end, "nothing listens on UDP {port}:\n{}", what.log_tail());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The messages SIPp logged as received (-trace_msg), each as text.
pub fn received_messages(log: &str) -> Vec<String> {
    log.split("-----------------------------------------------")
        .filter(|m| m.contains("message received"))
        .map(|m| m.split_once("bytes :").map(|x| x.1).unwrap_or(m).trim().to_owned())
        .collect()
}

/// The messages SIPp received, from its message file.
pub fn received_in(file: &Path) -> Vec<String> {
    received_messages(&std::fs::read_to_string(file).unwrap_or_default())
}

/// The first `c=` line of a message's SDP.
pub fn sdp_c_line(msg: &str) -> Option<String> {
    msg.lines().map(str::trim).find(|l| l.starts_with("c=")).map(str::to_owned)
}

/// The value of the first header `name` (case-insensitive) of a message.
pub fn header<'a>(msg: &'a str, name: &str) -> Option<&'a str> {
    msg.lines().take_while(|l| !l.trim().is_empty()).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The SIPp command line every test uses: scenario, local address and
/// port, UDP, one call, no keyboard, a deadline, and the message and error
/// logs in `dir` under `name`.
pub fn sipp(ns: &Netns, scenario: &Path, ip: &str, port: u16, dir: &TestDir, name: &str) -> Command {
    let mut c = ns.command("sipp");
    c.arg("-sf").arg(scenario).args(["-i", ip, "-p", &port.to_string(), "-t", "u1", "-m", "1", "-nostdin"]);
    c.args(["-timeout", "40s", "-timeout_error", "-trace_msg", "-message_file"]);
    c.arg(dir.join(&format!("{name}-messages.log")));
    c.arg("-trace_err").arg("-error_file").arg(dir.join(&format!("{name}-errors.log")));
    c
}
