//! `v6gate doctor`: what this host offers that v6gate, its tests and its
//! benches use, each item with what its absence disables, in one typed
//! report ([`Report`]: text for a person, JSON for a machine, one line for
//! a bench's report header).
//!
//! [`probe`] asks the kernel itself where it can — XDP attached to a
//! fresh veth pair in a throwaway namespace (native and generic),
//! `BPF_PROG_TEST_RUN` of the fast path's program, live frames
//! (`xdp::tester::live_frames`), an AF_XDP socket bound in copy mode,
//! sk_lookup and sockmap loaded, io_uring set up, a TUN device, raw
//! sockets of protocols 41 and 4 — and reads what it cannot try: the
//! descriptor limit and `CAP_SYS_RESOURCE`, the cpuidle driver and the PM
//! QoS CPU latency limit, the kernel release, the CPUs, and the peers on
//! PATH with their versions. The namespace is removed when the probe ends.
//! Without root, what needs root is reported `unknown` with that reason.

mod probe;

use std::fmt::Write as _;

use serde::Serialize;

pub use probe::probe;

/// [`probe`]'s one-line summary, for a bench's report (`doctor` in its
/// results.json).
pub fn bench_summary() -> String {
    probe().summary
}

/// The line a bench's Markdown report carries under its header.
pub fn header_line(summary: &str) -> String {
    format!("Host (`v6gate doctor`): {summary}.\n\n")
}

/// Whether the host has a feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Probed, and it works.
    Yes,
    /// Probed, and the kernel refused (the detail says how).
    No,
    /// Not probed (no root), or the probe itself could not run.
    Unknown,
}

impl State {
    fn word(self) -> &'static str {
        match self {
            State::Yes => "yes",
            State::No => "NO",
            State::Unknown => "unknown",
        }
    }
}

/// One feature of the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Feature {
    /// Short stable name (`xdp-native`, `live-frames`, ...).
    pub id: &'static str,
    /// What it is, for a person.
    pub name: &'static str,
    /// What the probe found.
    pub state: State,
    /// What it found, in a few words: the kernel's answer, a version, ...
    pub detail: String,
    /// What v6gate, its tests and benches cannot do without it.
    pub without: &'static str,
}

/// The process's descriptor limit (RLIMIT_NOFILE) and whether it can go
/// above the hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NoFile {
    /// Soft limit in force.
    pub soft: u64,
    /// Hard limit: as far as an unprivileged process may raise the soft one.
    pub hard: u64,
    /// The system's ceiling for the hard limit (`/proc/sys/fs/nr_open`).
    pub nr_open: Option<u64>,
    /// Whether this process may raise the hard limit (CAP_SYS_RESOURCE).
    pub can_raise_hard: bool,
}

/// The CPUs' idle states and the PM QoS CPU latency limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuIdle {
    /// `/sys/devices/system/cpu/cpuidle/current_driver` (`none` when the
    /// kernel has none; absent when the file is missing).
    pub driver: Option<String>,
    /// The cpuidle governor in force.
    pub governor: Option<String>,
    /// The machine's PM QoS CPU latency limit in µs (`/dev/cpu_dma_latency`;
    /// 2,000,000,000 when no request is held).
    pub pm_qos_limit_us: Option<u64>,
}

/// One peer program v6gate is tested and measured against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Peer {
    /// The peer's name (`TAYGA`, `rtpengine`, ...).
    pub name: &'static str,
    /// The program looked up on PATH.
    pub program: &'static str,
    /// Where it was found.
    pub path: Option<String>,
    /// Its version, as it reports it.
    pub version: Option<String>,
    /// What cannot run without it.
    pub without: &'static str,
}

/// What `v6gate doctor` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// The CPU model (`/proc/cpuinfo`).
    pub cpu_model: Option<String>,
    /// Whether the probe ran as root (the kernel features need it).
    pub root: bool,
    /// The kernel features, each probed.
    pub features: Vec<Feature>,
    /// The descriptor limit.
    pub nofile: Option<NoFile>,
    /// Idle states and the CPU latency limit.
    pub cpuidle: CpuIdle,
    /// The peers.
    pub peers: Vec<Peer>,
    /// [`Report::summary`], for machines that want the one line.
    pub summary: String,
}

impl Report {
    /// A feature by [`Feature::id`].
    pub fn feature(&self, id: &str) -> Option<&Feature> {
        self.features.iter().find(|f| f.id == id)
    }

    /// One line for a bench's report header: the kernel and CPUs, the
    /// features present and those missing (with the short reason), the
    /// descriptor limit, the cpuidle driver and the peers' versions.
    pub fn summary(&self) -> String {
        let ids = |s: State| self.features.iter().filter(|f| f.state == s).map(|f| f.id).collect::<Vec<_>>();
        let mut line = format!("kernel {}, {} CPUs", self.kernel, self.cpus);
        if !self.root {
            line += ", not root";
        }
        let _ = write!(line, "; has: {}", list_or_none(&ids(State::Yes)));
        let lacks: Vec<String> = self
            .features
            .iter()
            .filter(|f| f.state == State::No)
            .map(|f| format!("{} ({})", f.id, short(&f.detail)))
            .collect();
        if !lacks.is_empty() {
            let _ = write!(line, "; lacks: {}", lacks.join(", "));
        }
        let unknown = ids(State::Unknown);
        if !unknown.is_empty() {
            let _ = write!(line, "; unknown: {}", unknown.join(" "));
        }
        if let Some(n) = self.nofile {
            let raise = if n.can_raise_hard { "raisable" } else { "hard limit fixed" };
            let _ = write!(line, "; nofile {}/{} ({raise})", n.soft, n.hard);
        }
        let _ = write!(line, "; cpuidle {}", self.cpuidle.driver.as_deref().unwrap_or("?"));
        let peers: Vec<String> = self
            .peers
            .iter()
            .map(|p| match (&p.path, &p.version) {
                (None, _) => format!("{} MISSING", p.program),
                (Some(_), Some(v)) => format!("{} {v}", p.program),
                (Some(_), None) => p.program.to_owned(),
            })
            .collect();
        let _ = write!(line, "; peers: {}", peers.join(", "));
        line
    }

    /// The report as one pretty-printed JSON object, with a final newline
    /// (`v6gate doctor --json`).
    pub fn json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self).map(|s| s + "\n")
    }

    /// The screen `v6gate doctor` prints: every feature with its state,
    /// what it found and, when it is missing, what that disables; the
    /// limits; the peers.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let model = self.cpu_model.as_deref().map(|m| format!(" ({m})")).unwrap_or_default();
        let _ = writeln!(s, "v6gate doctor: kernel {}, {} CPUs{model}", self.kernel, self.cpus);
        if !self.root {
            let _ = writeln!(s, "not root: the kernel features below are unknown (run as root to probe them)");
        }
        let width = self.features.iter().map(|f| f.name.len()).max().unwrap_or(0);
        for f in &self.features {
            let _ = writeln!(s, "  {:<width$}  {:<7}  {}", f.name, f.state.word(), f.detail);
            if f.state != State::Yes {
                let _ = writeln!(s, "  {:<width$}           without it: {}", "", f.without);
            }
        }
        match self.nofile {
            Some(n) => {
                let nr = n.nr_open.map(|v| format!(", system ceiling {v}")).unwrap_or_default();
                let raise = if n.can_raise_hard {
                    "the hard limit can be raised (CAP_SYS_RESOURCE)"
                } else {
                    "the hard limit cannot be raised (no CAP_SYS_RESOURCE): it bounds the TrGW's per-port media sockets and the benches' call counts"
                };
                let _ = writeln!(s, "descriptors (RLIMIT_NOFILE): soft {}, hard {}{nr}; {raise}", n.soft, n.hard);
            }
            None => {
                let _ = writeln!(s, "descriptors (RLIMIT_NOFILE): cannot be read");
            }
        }
        let c = &self.cpuidle;
        let qos = match c.pm_qos_limit_us {
            Some(us) if us >= 2_000_000_000 => "none held".to_owned(),
            Some(us) => format!("{us} µs"),
            None => "unknown".to_owned(),
        };
        let _ = writeln!(
            s,
            "cpuidle: driver {}, governor {}; PM QoS CPU latency limit: {qos}",
            c.driver.as_deref().unwrap_or("unknown"),
            c.governor.as_deref().unwrap_or("unknown")
        );
        let _ = writeln!(s, "peers:");
        let width = self.peers.iter().map(|p| p.name.len()).max().unwrap_or(0);
        for p in &self.peers {
            match (&p.path, &p.version) {
                (Some(path), v) => {
                    let _ =
                        writeln!(s, "  {:<width$}  {}  ({path})", p.name, v.as_deref().unwrap_or("version unknown"));
                }
                (None, _) => {
                    let _ = writeln!(
                        s,
                        "  {:<width$}  MISSING ({} not on PATH; `make deps` installs it): {}",
                        p.name, p.program, p.without
                    );
                }
            }
        }
        s
    }
}

fn list_or_none(ids: &[&str]) -> String {
    if ids.is_empty() {
        "none".into()
    } else {
        ids.join(" ")
    }
}

/// The reason in a detail, for the one-line summary: what follows its
/// last `": "` (the kernel's answer at the end of a chain of contexts),
/// without the parentheses that closed around it, at most eight words.
fn short(detail: &str) -> String {
    let tail = detail.rsplit_once(": ").map_or(detail, |(_, t)| t);
    let mut depth = 0u32;
    let mut balanced = String::new();
    for c in tail.chars() {
        match c {
            '(' => depth += 1,
            // Closes a parenthesis opened before the tail.
            ')' if depth == 0 => continue,
            ')' => depth -= 1,
            _ => {}
        }
        balanced.push(c);
    }
    let words: Vec<&str> = balanced.split_whitespace().collect();
    if words.len() <= 8 {
        words.join(" ")
    } else {
        words[..8].join(" ") + " …"
    }
}

/// The version number in a program's `--version` output: the first word
/// that starts with a digit (after an optional `v`, `mr` or `version`
/// prefix) and holds a dot, without trailing punctuation.
pub fn version_number(output: &str) -> Option<String> {
    output.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')').find_map(|w| {
        let w = w.trim_start_matches(|c: char| c.is_ascii_alphabetic() || c == ':');
        let w = w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
        (w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('.')).then(|| w.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_numbers_of_the_peers_own_words() {
        // What each peer prints for its version flag (Debian's packages).
        let cases = [
            ("TAYGA 0.9.2", "0.9.2"),
            ("Version: mr12.5.1.32-1", "12.5.1.32-1"),
            ("version: kamailio 5.8.4 (x86_64/linux)\nflags: USE_TCP", "5.8.4"),
            (" SIPp v3.7.3-TLS-SCTP-PCAP-RTPSTREAM.\n", "3.7.3-TLS-SCTP-PCAP-RTPSTREAM"),
            ("miredo: Teredo IPv6 tunneling software 1.2.6 (http://www.remlab.net/miredo/)", "1.2.6"),
            (
                "socat by Gerhard Rieger and contributors - see www.dest-unreach.org\nsocat version 1.8.0.3 on 2024",
                "1.8.0.3",
            ),
            ("nftables v1.1.3 (Commodore Bullwinkle #4)", "1.1.3"),
        ];
        for (out, want) in cases {
            assert_eq!(version_number(out).as_deref(), Some(want), "{out}");
        }
        assert_eq!(version_number("usage: prog [options]"), None);
        assert_eq!(version_number(""), None);
    }

    fn feature(id: &'static str, state: State, detail: &str) -> Feature {
        Feature { id, name: id, state, detail: detail.into(), without: "the thing it does" }
    }

    fn report() -> Report {
        Report {
            kernel: "6.18.44".into(),
            cpus: 2,
            cpu_model: Some("Test CPU".into()),
            root: true,
            features: vec![
                feature("xdp-native", State::Yes, "attached to a veth"),
                feature(
                    "live-frames",
                    State::No,
                    "refused by the kernel (BPF_PROG_RUN with live frames: Operation not permitted (os error 1))",
                ),
                feature("io-uring", State::Unknown, "io_uring_setup: something odd"),
            ],
            nofile: Some(NoFile { soft: 20_000, hard: 20_000, nr_open: Some(1_048_576), can_raise_hard: false }),
            cpuidle: CpuIdle { driver: Some("none".into()), governor: None, pm_qos_limit_us: Some(2_000_000_000) },
            peers: vec![
                Peer {
                    name: "TAYGA",
                    program: "tayga",
                    path: Some("/usr/sbin/tayga".into()),
                    version: Some("0.9.2".into()),
                    without: "x",
                },
                Peer {
                    name: "Miredo",
                    program: "miredo",
                    path: None,
                    version: None,
                    without: "the Teredo interop tests",
                },
            ],
            summary: String::new(),
        }
    }

    #[test]
    fn the_summary_names_what_is_there_what_is_not_and_why_in_one_line() {
        let s = report().summary();
        assert!(!s.contains('\n'), "{s}");
        assert_eq!(
            s,
            "kernel 6.18.44, 2 CPUs; has: xdp-native; lacks: live-frames (Operation not permitted (os error 1)); \
             unknown: io-uring; nofile 20000/20000 (hard limit fixed); cpuidle none; peers: tayga 0.9.2, miredo MISSING"
        );
    }

    #[test]
    fn the_summary_keeps_the_kernels_answer() {
        assert_eq!(short("attached to a veth"), "attached to a veth");
        assert_eq!(short("loading program x: bpf(): Invalid argument (os error 22)"), "Invalid argument (os error 22)");
        assert_eq!(short("a b c d e f g h i j"), "a b c d e f g h …");
    }

    #[test]
    fn the_screen_says_what_a_missing_piece_disables() {
        let t = report().text();
        assert!(t.starts_with("v6gate doctor: kernel 6.18.44, 2 CPUs (Test CPU)\n"), "{t}");
        // A present feature: no "without it" line; a missing or unknown one has it.
        assert_eq!(t.matches("without it: the thing it does").count(), 2, "{t}");
        assert!(t.contains("live-frames  NO       refused by the kernel"), "{t}");
        assert!(t.contains("soft 20000, hard 20000, system ceiling 1048576; the hard limit cannot be raised"), "{t}");
        assert!(t.contains("cpuidle: driver none, governor unknown; PM QoS CPU latency limit: none held"), "{t}");
        assert!(
            t.contains("Miredo  MISSING (miredo not on PATH; `make deps` installs it): the Teredo interop tests"),
            "{t}"
        );
        assert!(t.contains("TAYGA   0.9.2  (/usr/sbin/tayga)"), "{t}");
    }

    #[test]
    fn json_has_every_section_with_lowercase_states() {
        let v = serde_json::to_value(report()).unwrap();
        assert_eq!(v["features"][1]["state"], "no");
        assert_eq!(v["features"][0]["id"], "xdp-native");
        assert_eq!(v["nofile"]["can_raise_hard"], false);
        assert_eq!(v["cpuidle"]["driver"], "none");
        assert_eq!(v["peers"][1]["path"], serde_json::Value::Null);
        for k in ["kernel", "cpus", "cpu_model", "root", "summary"] {
            assert!(v.get(k).is_some(), "{k}");
        }
    }
}
