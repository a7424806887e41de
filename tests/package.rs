//! The Debian package (issue #9 item 6): `scripts/package.sh` builds it
//! from the binary under test; it is installed with `dpkg --root` into an
//! empty root (only the C libraries the binary links are copied in, and
//! `/dev/net/tun`), and the systemd unit's `ExecStart` command line runs
//! there, chrooted, in a fresh network namespace, with the unit's
//! capability bounding set (plus `CAP_SYS_CHROOT` for the test's chroot)
//! and a `NOTIFY_SOCKET` the test listens on, as systemd would. The test
//! waits for `READY=1`, reads `/metrics` from the packaged default
//! configuration's admin address, reloads as `ExecReload` does and expects
//! `RELOADING=1` then `READY=1`, stops it (`STOPPING=1`, exit 0), and
//! checks that a broken configuration exits with the unit's
//! `RestartPreventExitStatus` (78). As under systemd, `JOURNAL_STREAM`
//! names the daemon's stderr, so it logs to the journal socket (here the
//! test's, at `/run/systemd/journal/socket` in the root) instead.
//!
//! Needs root (namespaces, chroot, mknod), `dpkg` and `dpkg-deb`; CI runs
//! as root on Debian.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lab::netns::Netns;

const BIN: &str = env!("CARGO_BIN_EXE_v6gate");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Builds the package into `out` and returns its path.
fn build_package(out: &Path) -> PathBuf {
    let o =
        run(Command::new(format!("{ROOT}/scripts/package.sh")).args(["--binary", BIN, "--out"]).arg(out).arg("--fast"));
    let deb = PathBuf::from(text(&o.stdout).trim());
    assert!(deb.is_file(), "package.sh printed {deb:?}");
    deb
}

/// An empty dpkg database under `root`, then the package installed into it.
/// Dependencies (libc6) are not in that database: `--force-depends`; the
/// maintainer scripts run outside the root with `DPKG_ROOT` set, which
/// they honour.
fn install(root: &Path, deb: &Path) {
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for f in ["var/lib/dpkg/status", "var/lib/dpkg/available"] {
        std::fs::write(root.join(f), "").unwrap();
    }
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--force-depends", "--force-script-chrootless", "--log=/dev/null", "-i"])
        .arg(deb));
}

/// The value of `key=` in the unit file's text.
fn unit_value<'a>(unit: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key}=");
    unit.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("the unit has no {key}="))
}

/// Copies the shared libraries `bin` links into `root`, at the same paths,
/// and creates `/dev/net/tun` and `/run` there.
fn furnish(root: &Path, bin: &Path) {
    let ldd = run(Command::new("ldd").arg(bin));
    for lib in text(&ldd.stdout).split_whitespace().filter(|w| w.starts_with('/')) {
        let dst = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(lib, &dst).unwrap_or_else(|e| panic!("copying {lib}: {e}"));
    }
    std::fs::create_dir_all(root.join("dev/net")).unwrap();
    std::fs::create_dir_all(root.join("run")).unwrap();
    run(Command::new("mknod").arg(root.join("dev/net/tun")).args(["c", "10", "200"]));
}

/// The daemon, killed if the test ends early.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads notifications until one contains `want`; returns everything read.
fn wait_for(sock: &UnixDatagram, want: &str, daemon: &mut Daemon, log: &Path) -> String {
    let end = Instant::now() + Duration::from_secs(30);
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(n) = sock.recv(&mut buf) {
            seen.push_str(&text(&buf[..n]));
            if seen.lines().any(|l| l == want) {
                return seen;
            }
        }
        if let Ok(Some(st)) = daemon.0.try_wait() {
            panic!("the daemon exited ({st}) before {want}:\n{}", std::fs::read_to_string(log).unwrap_or_default());
        }
        assert!(
            Instant::now() < end,
            "no {want} from the daemon (got {seen:?}):\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

/// `GET path` on the admin API inside `ns`: (status line, body).
fn get(ns: &Netns, addr: &str, path: &str) -> (String, String) {
    let addr = addr.to_string();
    let path = path.to_string();
    ns.run(move || {
        let mut s = TcpStream::connect(&addr)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
        let mut r = String::new();
        s.read_to_string(&mut r)?;
        let (head, body) = r.split_once("\r\n\r\n").unwrap_or((&r, ""));
        Ok((head.lines().next().unwrap_or("").to_string(), body.to_string()))
    })
    .expect("admin API request")
}

/// The fields of one record of journald's native protocol: `KEY=value\n`,
/// or `KEY\n`, a 64-bit little-endian length, the value and `\n`.
fn journal_fields(mut r: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(nl) = r.iter().position(|&b| b == b'\n') {
        let line = &r[..nl];
        if let Some(eq) = line.iter().position(|&b| b == b'=') {
            out.push((text(&line[..eq]), line[eq + 1..].to_vec()));
            r = &r[nl + 1..];
        } else {
            let Some(len) = r.get(nl + 1..nl + 9) else { break };
            let len = u64::from_le_bytes(len.try_into().unwrap()) as usize;
            let Some(v) = r.get(nl + 9..nl + 9 + len) else { break };
            out.push((text(line), v.to_vec()));
            r = r.get(nl + 10 + len..).unwrap_or(&[]);
        }
    }
    out
}

#[test]
fn package_installs_and_its_unit_runs_the_daemon() {
    lab::need_root!();
    let tmp = tempfile::tempdir().unwrap();
    let deb = build_package(&tmp.path().join("out"));

    // What the package holds.
    let listing = text(&run(Command::new("dpkg-deb").arg("--contents").arg(&deb)).stdout);
    for f in [
        "./usr/bin/v6gate",
        "./usr/lib/systemd/system/v6gate.service",
        "./etc/v6gate/v6gate.toml",
        "./usr/share/man/man1/v6gate.1.gz",
        "./usr/share/man/man1/v6gate-run.1.gz",
        "./usr/share/bash-completion/completions/v6gate",
        "./usr/share/zsh/vendor-completions/_v6gate",
        "./usr/share/fish/vendor_completions.d/v6gate.fish",
        "./usr/share/doc/v6gate/copyright",
    ] {
        assert!(listing.lines().any(|l| l.ends_with(f)), "{f} not in the package:\n{listing}");
    }
    let depends = text(&run(Command::new("dpkg-deb").args(["--field"]).arg(&deb).arg("Depends")).stdout);
    assert!(depends.starts_with("libc6 (>= 2."), "Depends: {depends}");

    // Installed into an empty root: the conffile is registered as one.
    let root = tmp.path().join("root");
    install(&root, &deb);
    let status =
        text(&run(Command::new("dpkg").arg(format!("--root={}", root.display())).args(["-s", "v6gate"])).stdout);
    assert!(status.contains("Status: install ok installed"), "{status}");
    assert!(status.contains("Conffiles:\n /etc/v6gate/v6gate.toml "), "{status}");
    let conf = std::fs::read_to_string(root.join("etc/v6gate/v6gate.toml")).unwrap();
    assert_eq!(conf, text(&run(Command::new(BIN).args(["config", "example"])).stdout), "conffile = config example");

    // The unit as installed.
    let unit = std::fs::read_to_string(root.join("usr/lib/systemd/system/v6gate.service")).unwrap();
    assert_eq!(unit_value(&unit, "Type"), "notify");
    assert_eq!(unit_value(&unit, "ExecReload"), "/bin/kill -HUP $MAINPID");
    let caps: Vec<&str> = unit_value(&unit, "CapabilityBoundingSet").split_whitespace().collect();
    assert_eq!(caps, ["CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_NET_BIND_SERVICE"]);
    assert_eq!(unit_value(&unit, "AmbientCapabilities").split_whitespace().collect::<Vec<_>>(), caps);
    let no_restart: i32 = unit_value(&unit, "RestartPreventExitStatus").parse().unwrap();
    // systemd's own parser accepts every line (when systemd-analyze is here).
    if Command::new("systemd-analyze").arg("--version").output().is_ok_and(|o| o.status.success()) {
        let check = tmp.path().join("v6gate.service");
        std::fs::write(&check, unit.replace("/usr/bin/v6gate", &root.join("usr/bin/v6gate").display().to_string()))
            .unwrap();
        let o = run(Command::new("systemd-analyze").args(["verify", "--man=no"]).arg(&check));
        assert!(o.stdout.is_empty() && o.stderr.is_empty(), "systemd-analyze verify:\n{}", text(&o.stderr));
    } else {
        eprintln!("package test: systemd-analyze not installed, unit syntax not verified");
    }

    // ExecStart, as systemd would run it: in the root, with the unit's
    // capabilities, in a network namespace, with NOTIFY_SOCKET.
    let exec: Vec<&str> = unit_value(&unit, "ExecStart").split_whitespace().collect();
    assert_eq!(exec, ["/usr/bin/v6gate", "run"], "ExecStart uses the default configuration path");
    furnish(&root, &root.join("usr/bin/v6gate"));
    let notify = UnixDatagram::bind(root.join("run/notify.sock")).unwrap();
    notify.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    std::fs::create_dir_all(root.join("run/systemd/journal")).unwrap();
    let journal = UnixDatagram::bind(root.join("run/systemd/journal/socket")).unwrap();
    journal.set_nonblocking(true).unwrap();
    let bounding = format!(
        "-all,{},+sys_chroot",
        caps.iter().map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase())).collect::<Vec<_>>().join(",")
    );
    let ns = Netns::unique("v6pkg").unwrap();
    let start = |log: &Path, journal: bool, rust_log: Option<&str>| {
        let log_file = std::fs::File::create(log).unwrap();
        let stream = {
            use std::os::unix::fs::MetadataExt as _;
            let m = log_file.metadata().unwrap();
            format!("{}:{}", m.dev(), m.ino())
        };
        let mut cmd = ns.command("setpriv");
        if journal {
            cmd.env("JOURNAL_STREAM", stream);
        } else {
            cmd.env_remove("JOURNAL_STREAM");
        }
        match rust_log {
            Some(l) => cmd.env("RUST_LOG", l),
            None => cmd.env_remove("RUST_LOG"),
        };
        let child = cmd
            .args(["--bounding-set", &bounding, "chroot"])
            .arg(&root)
            .args(&exec)
            .env("NOTIFY_SOCKET", "/run/notify.sock")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("starting ExecStart");
        Daemon(child)
    };
    let log = tmp.path().join("daemon.log");
    let mut daemon = start(&log, true, None);
    let seen = wait_for(&notify, "READY=1", &mut daemon, &log);
    assert!(seen.contains("STATUS=running:"), "{seen}");
    // Its log went to the journal, with a priority and its name, not to stderr.
    let mut records = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = journal.recv(&mut buf) {
        records.push(buf[..n].to_vec());
    }
    let running = records
        .iter()
        .map(|r| journal_fields(r))
        .find(|f| f.iter().any(|(k, v)| k == "MESSAGE" && v.starts_with(b"running:")))
        .unwrap_or_else(|| {
            panic!("no journal record of the start: {records:?}\nstderr: {}", std::fs::read_to_string(&log).unwrap())
        });
    let field = |k: &str| running.iter().find(|(n, _)| n == k).map(|(_, v)| text(v));
    assert_eq!(field("PRIORITY").as_deref(), Some("6"), "info is syslog's Informational: {running:?}");
    assert_eq!(field("SYSLOG_IDENTIFIER").as_deref(), Some("v6gate"));
    assert!(!std::fs::read_to_string(&log).unwrap().contains("running:"), "logged to the journal only");

    // /metrics from the packaged configuration's admin address.
    let admin = conf
        .lines()
        .find_map(|l| l.strip_prefix("listen = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("[admin] listen in the packaged configuration");
    let (status, body) = get(&ns, admin, "/metrics");
    assert!(status.contains(" 200 "), "{status}\n{body}");
    assert!(body.lines().any(|l| l.starts_with("v6gate_packets_total")), "{body}");

    // ExecReload: SIGHUP to the main process.
    let pid = daemon.0.id().to_string();
    run(Command::new("kill").args(["-HUP", &pid]));
    let seen = wait_for(&notify, "READY=1", &mut daemon, &log);
    assert!(seen.contains("RELOADING=1\n") && seen.contains("MONOTONIC_USEC="), "{seen}");
    assert!(seen.find("RELOADING=1").unwrap() < seen.rfind("READY=1").unwrap(), "{seen}");

    // Stop: SIGTERM, STOPPING=1, exit 0, the device gone.
    let stop = |daemon: &mut Daemon, log: &Path| {
        run(Command::new("kill").args(["-TERM", &daemon.0.id().to_string()]));
        wait_for(&notify, "STOPPING=1", daemon, log);
        let end = Instant::now() + Duration::from_secs(20);
        let st = loop {
            if let Some(st) = daemon.0.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < end, "the daemon did not stop:\n{}", std::fs::read_to_string(log).unwrap());
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(st.success(), "exit {st}:\n{}", std::fs::read_to_string(log).unwrap());
        let links = text(&ns.ip(&["-o", "link"]).unwrap().stdout);
        assert!(!links.contains("v6gate0"), "the TUN device is gone: {links}");
    };
    stop(&mut daemon, &log);

    // The level comes from [daemon] log-level, unless RUST_LOG is set; and
    // `ctl` finds a moved admin address in the default configuration.
    let quiet = conf
        .replace("log-level = \"info\"", "log-level = \"warn\"")
        .replace("listen = \"127.0.0.1:9164\"", "listen = \"127.0.0.1:9300\"");
    assert_eq!(quiet.matches(":9300").count(), 1, "the packaged configuration sets log-level and [admin] listen");
    std::fs::write(root.join("etc/v6gate/v6gate.toml"), quiet).unwrap();
    for (rust_log, shown) in [(None, false), (Some("info"), true)] {
        let log = tmp.path().join("level.log");
        let mut daemon = start(&log, false, rust_log);
        wait_for(&notify, "READY=1", &mut daemon, &log);
        let o = run(ns.command("chroot").arg(&root).args(["/usr/bin/v6gate", "ctl", "status"]));
        assert!(text(&o.stdout).contains("\"functions\""), "ctl status: {}", text(&o.stdout));
        stop(&mut daemon, &log);
        let err = std::fs::read_to_string(&log).unwrap();
        assert_eq!(err.contains("running:"), shown, "RUST_LOG={rust_log:?}, log-level = \"warn\":\n{err}");
    }

    // A broken configuration: the exit status the unit does not restart on.
    std::fs::write(root.join("etc/v6gate/v6gate.toml"), "[siit]\npool6 = \"2001:db8::1/32\"\n").unwrap();
    let log = tmp.path().join("broken.log");
    let mut daemon = start(&log, false, None);
    let st = daemon.0.wait().unwrap();
    assert_eq!(st.code(), Some(no_restart), "{}", std::fs::read_to_string(&log).unwrap());
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(err.contains("v6gate: config error in /etc/v6gate/v6gate.toml: line 2"), "{err}");
    let mut buf = [0u8; 256];
    assert!(notify.recv(&mut buf).is_err(), "no READY=1 from a daemon that did not start");
}
