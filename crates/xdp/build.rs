//! Builds the XDP programs: `bpf/*.bpf.c` → BPF ELF objects in OUT_DIR
//! with Debian's clang (`-target bpf -mcpu=v3 -O2 -g`: BTF for the maps and the
//! loader), after writing `v6gate_abi.h` from `src/types.rs`
//! ([`types::abi_header`]): every contract struct's C declaration with a
//! static assert per struct size and field offset and size, and every
//! shared constant and counter index, so the C and Rust sides cannot
//! drift apart.

use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(dead_code)]
#[path = "src/types.rs"]
mod types;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("../../bpf").canonicalize().expect("bpf/ next to crates/");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=src/types.rs");
    println!("cargo:rerun-if-changed=src/types");
    println!("cargo:rerun-if-changed={}", bpf_dir.display());
    println!("cargo:rerun-if-env-changed=CLANG");

    std::fs::write(out.join("v6gate_abi.h"), types::abi_header()).expect("write v6gate_abi.h");

    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // The multiarch directory holds <asm/types.h>, which <linux/bpf.h> needs.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        "arm" => "arm-linux-gnueabihf",
        "riscv64" => "riscv64-linux-gnu",
        "powerpc64" => "powerpc64le-linux-gnu",
        "s390x" => "s390x-linux-gnu",
        other => panic!("no multiarch include directory known for target arch {other}"),
    };
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&bpf_dir)
        .expect("read bpf/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    sources.sort();
    for entry in std::fs::read_dir(&bpf_dir).expect("read bpf/").flatten() {
        println!("cargo:rerun-if-changed={}", entry.path().display());
    }
    for src in &sources {
        let stem = src.file_name().unwrap().to_string_lossy().trim_end_matches(".bpf.c").to_string();
        let obj = out.join(format!("{stem}.bpf.o"));
        compile(&clang, multiarch, &bpf_dir, &out, src, &obj);
    }
}

fn compile(clang: &str, multiarch: &str, bpf_dir: &Path, out: &Path, src: &Path, obj: &Path) {
    let mut cmd = Command::new(clang);
    cmd.args(["-target", "bpf", "-mcpu=v3", "-O2", "-g", "-Wall", "-Werror", "-Wno-unused-function"])
        .arg(format!("-I{}", out.display()))
        .arg(format!("-I{}", bpf_dir.display()))
        .arg(format!("-I/usr/include/{multiarch}"))
        .arg("-c")
        .arg(src)
        .arg("-o")
        .arg(obj);
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "\n\nthe XDP programs need clang (`{clang}` was not found): install the Debian packages \
             clang and libbpf-dev (`make deps` / scripts/deps.sh does), or set CLANG=/path/to/clang\n\n"
        ),
        Err(e) => panic!("cannot run {clang}: {e}"),
    };
    if !status.success() {
        panic!(
            "\n\nclang failed to build {} ({status}); if <bpf/bpf_helpers.h> or <linux/bpf.h> is missing, \
             install libbpf-dev and linux-libc-dev (scripts/deps.sh)\n\n",
            src.display()
        );
    }
}
