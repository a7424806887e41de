//! The workspace's manifest says what is true: `rust-version` is the
//! toolchain the locked dependencies need (issue #9 item 8), and every
//! member inherits it, so clippy's `incompatible_msrv` lint checks each
//! crate's code against it.
//!
//! The code's own minimum is not computed here: clippy (`make test`, `-D
//! warnings`) refuses any std API newer than `rust-version` in any member.
//! Today the code needs 1.87 (`u64::is_multiple_of`), below what the
//! dependencies need, so the workspace says exactly the dependencies'
//! maximum.

use std::process::Command;

use serde_json::Value;

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// `cargo metadata` for the host platform, from the lock file.
fn metadata() -> Value {
    let vv = Command::new(cargo()).arg("-vV").output().expect("cargo -vV");
    let vv = String::from_utf8_lossy(&vv.stdout).into_owned();
    let host = vv.lines().find_map(|l| l.strip_prefix("host: ")).expect("cargo -vV names the host").trim().to_string();
    let out = Command::new(cargo())
        .args(["metadata", "--format-version", "1", "--locked", "--filter-platform", &host])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// `"1.85"`, `"1.85.0"` → `(1, 85, 0)`.
fn version(s: &str) -> (u64, u64, u64) {
    let mut it = s.split('.').map(|p| p.parse::<u64>().unwrap_or_else(|_| panic!("bad rust-version {s:?}")));
    (it.next().unwrap_or(0), it.next().unwrap_or(0), it.next().unwrap_or(0))
}

fn str_field<'a>(p: &'a Value, k: &str) -> &'a str {
    p[k].as_str().unwrap_or("")
}

#[test]
fn rust_version_is_what_the_locked_dependencies_need() {
    let m = metadata();
    let members: Vec<&str> = m["workspace_members"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let resolved: Vec<&str> =
        m["resolve"]["nodes"].as_array().unwrap().iter().filter_map(|n| n["id"].as_str()).collect();
    let packages = m["packages"].as_array().unwrap();

    // Every member says the same rust-version (inherited from the workspace).
    let mut ours = None;
    for p in packages.iter().filter(|p| members.contains(&str_field(p, "id"))) {
        let rv = p["rust_version"].as_str();
        assert!(rv.is_some(), "{} has no rust-version: add `rust-version.workspace = true`", str_field(p, "name"));
        match ours {
            None => ours = rv,
            Some(o) => assert_eq!(Some(o), rv, "{} says another rust-version", str_field(p, "name")),
        }
    }
    let ours = version(ours.expect("the workspace has members"));

    // The highest rust-version among the dependencies built on this host.
    let (need, who) = packages
        .iter()
        .filter(|p| !members.contains(&str_field(p, "id")) && resolved.contains(&str_field(p, "id")))
        .filter_map(|p| {
            let rv = p["rust_version"].as_str()?;
            Some((version(rv), format!("{} {}", str_field(p, "name"), str_field(p, "version"))))
        })
        .max()
        .expect("some dependency declares a rust-version");
    assert!(ours >= need, "rust-version {ours:?} is below what {who} needs ({need:?}): raise it in Cargo.toml");
    assert_eq!(
        ours, need,
        "rust-version {ours:?} is higher than the dependencies need ({need:?}, {who}); if the code needs it, say so \
         in this test's header and relax this check"
    );
}
