//! Shared by the `v6gate translate` / `config` contract tests: the built
//! binary, run as an external harness would.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_v6gate");

/// A scratch directory `GROUP/NAME` under cargo's test temporary directory.
pub fn scratch(group: &str, name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(group).join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `v6gate ARGS` with stdin, stdout and stderr piped.
pub fn command(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Run `v6gate ARGS` with `stdin` as its input, to the end.
pub fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = command(args).spawn().expect("spawn v6gate");
    // The child may exit before reading (bad configuration): ignore EPIPE.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}
