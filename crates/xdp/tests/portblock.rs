//! The port-block allocator shared by the XDP programs (`bpf/portblock.h`):
//! its host unit test (`bpf/test/portblock_test.c`: every block size
//! filled exactly, hints, give-back, bits held by another owner, threads
//! racing for one block) compiled with the clang that builds the programs
//! and run.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn portblock_allocator_contract() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bpf");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("portblock_test");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let st = Command::new(&clang)
        .args(["-O2", "-Wall", "-Werror", "-pthread"])
        .arg(format!("-I{}", root.display()))
        .arg(root.join("test/portblock_test.c"))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {clang}: {e}"));
    assert!(st.success(), "{clang} failed on bpf/test/portblock_test.c");
    let run = Command::new(&out).output().expect("run portblock_test");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "portblock_test failed:\n{stderr}");
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "ok");
}
