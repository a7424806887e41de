//! What a test may do on this machine, decided in one place, and the one
//! line a test writes when it does not run its body.
//!
//! Every test that needs root (network namespaces, TUN devices, BPF), a
//! peer program (TAYGA, rtpengine, Kamailio, SIPp, Miredo, ...) or a kernel
//! feature the machine may lack starts with one of these checks and returns
//! at once when it says no:
//!
//! ```no_run
//! #[test]
//! fn veth_pair_carries_pings() {
//!     lab::need_root!(); // returns here, saying why, when the test may not run
//!     // ... the body, as root ...
//! }
//!
//! #[test]
//! fn kamailio_relays_a_call() {
//!     lab::need_root_and_programs!("kamailio", "sipp");
//!     // ...
//! }
//! ```
//!
//! The macros name the test after the function they expand in
//! ([`test_name!`](crate::test_name)) and return from it; the functions
//! [`need_root`], [`need_programs`] and [`skip`] take the name and leave
//! the returning to the caller. What the tiers do not decide — a kernel
//! that refuses live frames, a device the machine lacks — a test skips
//! with [`skip_test!`](crate::skip_test):
//!
//! ```no_run
//! # fn live_frames_refused() -> Option<String> { None }
//! #[test]
//! fn generator_sends() {
//!     lab::need_root!();
//!     if let Some(why) = live_frames_refused() {
//!         lab::skip_test!("live frames {why}");
//!     }
//!     // ...
//! }
//! ```
//!
//! A test that does not run its body always says so: [`skip`] writes
//! `SKIPPED <test>: <why>` on stderr (straight to the stream, not through
//! `eprintln!`, which libtest captures for passing tests) and appends the
//! line to the file named by `V6GATE_TEST_SKIP_LOG` when that is set (the
//! Makefile's tiers print the collected lines after the run).
//!
//! The tier (`V6GATE_TEST_TIER`) says what a run wants:
//!
//! - `check` (`make check`): no root, no peers, no namespaces; every test
//!   that needs them skips, also when run as root.
//! - unset (a plain `cargo test`): a test runs when it can; as a user
//!   without root, or without a peer installed, it skips and says why.
//! - `full` (`make test`, what CI runs): everything. A test that needs root
//!   or a peer fails when it is missing instead of skipping. Only what the
//!   kernel itself refuses (for instance live frames, through [`skip`])
//!   still skips.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The environment variable that names the tier.
pub const TIER_VAR: &str = "V6GATE_TEST_TIER";
/// The environment variable naming a file every skip line is appended to.
pub const SKIP_LOG_VAR: &str = "V6GATE_TEST_SKIP_LOG";

/// Which tests a run wants (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// `make check`: nothing that needs root, namespaces or peers.
    Check,
    /// A plain `cargo test`: what this machine and user can run.
    Default,
    /// `make test`: everything; a missing requirement is a failure.
    Full,
}

impl Tier {
    /// The tier a value of `V6GATE_TEST_TIER` names (unset or empty:
    /// [`Tier::Default`]).
    pub fn parse(value: Option<&str>) -> Result<Tier, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(Tier::Default),
            Some("check") => Ok(Tier::Check),
            Some("full") => Ok(Tier::Full),
            Some(other) => Err(format!("{TIER_VAR}={other}: expected `check`, `full` or unset")),
        }
    }

    /// The tier of this process (`V6GATE_TEST_TIER`). A value that names
    /// no tier fails the test that asks, saying so.
    pub fn current() -> Tier {
        let value = std::env::var(TIER_VAR).ok();
        Tier::parse(value.as_deref()).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Check => "check",
            Tier::Default => "default",
            Tier::Full => "full",
        })
    }
}

/// Whether `V6GATE_TEST_TIER` names the check tier (an unknown value does
/// not). [`crate::netns::Netns::create`] refuses to create a namespace
/// then, whoever runs it.
pub fn check_tier() -> bool {
    std::env::var(TIER_VAR).ok().is_some_and(|v| Tier::parse(Some(&v)) == Ok(Tier::Check))
}

/// What a test does about one requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run the body.
    Run,
    /// Skip it, for this reason.
    Skip(String),
    /// Fail the test, for this reason (the full tier wants it run).
    Fail(String),
}

/// The verdict for a test that needs root (network namespaces, TUN, BPF),
/// in `tier`, for a process that is root or not.
pub fn root_verdict(tier: Tier, root: bool) -> Verdict {
    match (tier, root) {
        (Tier::Check, _) => Verdict::Skip(format!("needs root; the check tier ({TIER_VAR}=check) runs none of those")),
        (_, true) => Verdict::Run,
        (Tier::Default, false) => {
            Verdict::Skip("needs root (network namespaces, TUN, BPF); `make test` runs it as root".into())
        }
        (Tier::Full, false) => {
            Verdict::Fail(format!("needs root, and {TIER_VAR}=full (make test, CI) runs every test"))
        }
    }
}

/// The verdict for a test that needs the programs `missing` is left with
/// after looking them up (empty: all found), in `tier`.
pub fn programs_verdict(tier: Tier, missing: &[&str]) -> Verdict {
    if tier == Tier::Check {
        return Verdict::Skip(format!("runs peer programs; the check tier ({TIER_VAR}=check) runs none of those"));
    }
    if missing.is_empty() {
        return Verdict::Run;
    }
    let what = format!("{} not installed (`make deps` installs it)", missing.join(", "));
    match tier {
        Tier::Full => Verdict::Fail(format!("{what}, and {TIER_VAR}=full (make test, CI) runs every test")),
        _ => Verdict::Skip(what),
    }
}

/// Whether this process runs as root: the one root check of the tests,
/// the lab and the benches.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// True when `test`, which needs root, may run here. Otherwise writes the
/// skip line and returns false, or, in the full tier, panics saying what
/// is missing.
pub fn need_root(test: &str) -> bool {
    decide(test, root_verdict(Tier::current(), is_root()))
}

/// True when every program in `programs` (peers such as `tayga`,
/// `kamailio`, `sipp`) is on PATH and the tier runs peer tests. Otherwise
/// as [`need_root`]: a skip line and false, or a panic in the full tier.
pub fn need_programs(test: &str, programs: &[&str]) -> bool {
    let missing: Vec<&str> = programs.iter().copied().filter(|p| find_program(Path::new(p)).is_none()).collect();
    decide(test, programs_verdict(Tier::current(), &missing))
}

/// [`need_root`] and then [`need_programs`]: one skip line at most.
pub fn need_root_and_programs(test: &str, programs: &[&str]) -> bool {
    need_root(test) && need_programs(test, programs)
}

fn decide(test: &str, verdict: Verdict) -> bool {
    match verdict {
        Verdict::Run => true,
        Verdict::Skip(why) => {
            skip(test, &why);
            false
        }
        Verdict::Fail(why) => panic!("{test} {why}"),
    }
}

/// Says that `test` does not run its body, and why: one line
/// `SKIPPED <test>: <why>` on stderr, also appended to the file named by
/// `V6GATE_TEST_SKIP_LOG` when set. For what the tiers do not decide: a
/// kernel that refuses live frames, a feature this machine lacks.
pub fn skip(test: &str, why: &str) {
    let log = std::env::var_os(SKIP_LOG_VAR).map(PathBuf::from);
    // Straight to the stream: libtest captures `eprintln!` of passing tests.
    skip_to(&skip_line(test, why), &mut std::io::stderr(), log.as_deref());
}

/// Writes a skip `line` to `err` and appends it to `log`.
fn skip_to(line: &str, err: &mut dyn std::io::Write, log: Option<&Path>) {
    let _ = err.write_all(line.as_bytes());
    if let Some(path) = log {
        // One write of a short line with O_APPEND: lines of tests running in
        // parallel (and of several test binaries) do not interleave.
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// The line [`skip`] writes, newline included; `why` on one line.
pub fn skip_line(test: &str, why: &str) -> String {
    let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("SKIPPED {test}: {why}\n")
}

/// A function's path as `std::any::type_name` gives it for an item inside
/// it (`crate::module::function::f`), without the crate, the item and the
/// closures: `module::function`, the name libtest lists the test under.
pub fn fn_path(item: &str) -> String {
    let mut parts: Vec<&str> = item.split("::").collect();
    parts.pop(); // the item itself
    while parts.last() == Some(&"{{closure}}") {
        parts.pop();
    }
    parts.iter().skip(1).copied().collect::<Vec<_>>().join("::")
}

/// The name of the function this expands in, as libtest lists a test
/// (`module::function`, without the crate).
#[macro_export]
macro_rules! test_name {
    () => {{
        fn f() {}
        $crate::testenv::fn_path(::std::any::type_name_of_val(&f))
    }};
}

/// Returns from the calling test (with `$ret`, default `()`) when it may
/// not run here for want of root: [`need_root`] with the test's name.
#[macro_export]
macro_rules! need_root {
    () => {
        $crate::need_root!(())
    };
    ($ret:expr) => {
        if !$crate::testenv::need_root(&$crate::test_name!()) {
            return $ret;
        }
    };
}

/// Returns from the calling test when one of the programs is missing or
/// the tier runs no peer test: [`need_programs`] with the test's name.
#[macro_export]
macro_rules! need_programs {
    ($($prog:expr),+ $(,)?) => {
        if !$crate::testenv::need_programs(&$crate::test_name!(), &[$($prog),+]) {
            return;
        }
    };
}

/// [`need_root!`](crate::need_root) and then
/// [`need_programs!`](crate::need_programs): one skip line at most.
#[macro_export]
macro_rules! need_root_and_programs {
    ($($prog:expr),+ $(,)?) => {
        if !$crate::testenv::need_root_and_programs(&$crate::test_name!(), &[$($prog),+]) {
            return;
        }
    };
}

/// Skips the calling test for a reason the tiers do not decide (a kernel
/// that refuses live frames, a device this machine lacks): [`skip`] with
/// the test's name and the `format!` of the arguments, then returns.
#[macro_export]
macro_rules! skip_test {
    ($($why:tt)+) => {{
        $crate::testenv::skip(&$crate::test_name!(), &format!($($why)+));
        return;
    }};
}

/// `bin` as given when it names a path (and is a file), else the first
/// file of that name in a directory of PATH. The one PATH lookup of the
/// tests, the benches' peers and `v6gate doctor`.
pub fn find_program(bin: &Path) -> Option<PathBuf> {
    if bin.components().count() > 1 {
        return bin.is_file().then(|| bin.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(bin)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_parse_from_the_variable() {
        assert_eq!(Tier::parse(None), Ok(Tier::Default));
        assert_eq!(Tier::parse(Some("")), Ok(Tier::Default));
        assert_eq!(Tier::parse(Some("check")), Ok(Tier::Check));
        assert_eq!(Tier::parse(Some(" full ")), Ok(Tier::Full));
        assert_eq!(Tier::parse(Some("quick")), Err("V6GATE_TEST_TIER=quick: expected `check`, `full` or unset".into()));
        assert_eq!(Tier::Check.to_string(), "check");
    }

    #[test]
    fn root_tests_run_as_root_skip_otherwise_and_fail_in_the_full_tier() {
        assert_eq!(root_verdict(Tier::Default, true), Verdict::Run);
        assert_eq!(root_verdict(Tier::Full, true), Verdict::Run);
        assert!(matches!(root_verdict(Tier::Default, false), Verdict::Skip(w) if w.starts_with("needs root")));
        assert!(matches!(root_verdict(Tier::Full, false), Verdict::Fail(w) if w.contains("V6GATE_TEST_TIER=full")));
        // The check tier skips them whoever runs it.
        for root in [false, true] {
            assert!(matches!(root_verdict(Tier::Check, root), Verdict::Skip(w) if w.contains("check tier")));
        }
    }

    #[test]
    fn peer_tests_skip_when_a_peer_is_missing_except_in_the_full_tier() {
        assert_eq!(programs_verdict(Tier::Default, &[]), Verdict::Run);
        assert_eq!(programs_verdict(Tier::Full, &[]), Verdict::Run);
        assert!(matches!(programs_verdict(Tier::Check, &[]), Verdict::Skip(w) if w.contains("check tier")));
        assert_eq!(
            programs_verdict(Tier::Default, &["kamailio", "sipp"]),
            Verdict::Skip("kamailio, sipp not installed (`make deps` installs it)".into())
        );
        assert!(
            matches!(programs_verdict(Tier::Full, &["tayga"]), Verdict::Fail(w) if w.starts_with("tayga not installed"))
        );
    }

    #[test]
    fn the_skip_line_is_one_line() {
        assert_eq!(skip_line("t", "live frames\n  refused (EPERM)"), "SKIPPED t: live frames refused (EPERM)\n");
    }

    #[test]
    fn skip_lines_go_to_the_log_file() {
        let dir = std::env::temp_dir().join(crate::netns::unique_name("v6gate-skiplog"));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips");
        let mut err = Vec::new();
        skip_to(&skip_line("a", "first"), &mut err, Some(&log));
        skip_to(&skip_line("b", "second"), &mut err, Some(&log));
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(text, "SKIPPED a: first\nSKIPPED b: second\n");
        assert_eq!(String::from_utf8(err).unwrap(), text, "the same lines on stderr");
    }

    #[test]
    fn tests_are_named_as_libtest_lists_them() {
        assert_eq!(fn_path("lab::testenv::tests::t::f"), "testenv::tests::t");
        assert_eq!(fn_path("attach::bounded_maps::{{closure}}::{{closure}}::f"), "bounded_maps");
        assert_eq!(crate::test_name!(), "testenv::tests::tests_are_named_as_libtest_lists_them");
        let in_closure = || crate::test_name!();
        assert_eq!(in_closure(), "testenv::tests::tests_are_named_as_libtest_lists_them");
    }

    #[test]
    fn programs_are_found_on_path_or_as_given() {
        let sh = find_program(Path::new("sh")).expect("sh is on PATH");
        assert!(sh.is_absolute() && sh.ends_with("sh"));
        assert_eq!(find_program(&sh), Some(sh.clone()), "a path is taken as given");
        assert_eq!(find_program(Path::new("no-such-program-v6gate")), None);
        assert_eq!(find_program(Path::new("/nonexistent/sh")), None);
    }
}
