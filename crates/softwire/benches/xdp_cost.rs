//! Per-packet cost of the lwAFTR's XDP fast path (`xdp_softwire`) with
//! BPF_PROG_TEST_RUN. Root only; builds the namespace of the differential
//! test (`tests/lwaftr_xdp.rs`).
//!
//!     cargo bench -p softwire --bench xdp_cost
//!
//! Each call runs the program once over the frame (a decapsulated or
//! encapsulated packet is not one the program takes again, so the
//! repeat-in-place trick of crates/xdp's cost bench does not apply); the
//! figure is the kernel's mean run time over many calls: parsing, the
//! binding lookups, bpf_fib_lookup and the rewrite, the redirect itself
//! not (it is not executed in this mode), **plus the per-call overhead of
//! a one-run BPF_PROG_TEST_RUN**, so an upper bound. The pass row is an
//! IPv4 packet to an address no binding holds (entry, one map lookup,
//! counter): the floor that overhead included. Timing on a shared machine
//! is noisy: run it on a quiet one.

#[path = "../tests/xdp_support/mod.rs"]
mod xdp_support;

use xdp::action;
use xdp_support::*;

const CALLS: u32 = 20_000;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("xdp_softwire: bench");
        return;
    }
    // On a thread of its own: the namespace's removal kills the processes
    // whose main thread is inside it.
    std::thread::spawn(bench).join().expect("the bench thread");
}

fn bench() {
    let b = Bed::new(None);
    let p1 = port(1, 5);
    let rows: [(&str, Vec<u8>, &[u32]); 4] = [
        ("softwire->IPv4 UDP (decap)", sw(B4_1, &V4::new(17, SHARED, HOST).udp(p1, 53, &[0; 18])), &[action::REDIRECT]),
        ("IPv4->softwire UDP (encap)", V4::new(17, HOST, SHARED).udp(53, p1, &[0; 18]), &[action::REDIRECT]),
        ("IPv4->softwire TCP, whole address", V4::new(6, HOST, WHOLE).tcp(443, 80, 0x10, &[0; 6]), &[action::REDIRECT]),
        ("pass: unbound IPv4 address", V4::new(17, HOST, UNBOUND).udp(53, 1, &[0; 18]), &[action::PASS]),
    ];
    println!("{:<36} {:>10}", "xdp_softwire (repeat 1)", "ns/packet");
    for (name, l3, want) in rows {
        let (frame, ingress) = b.frame(&l3, 0);
        let fp = b.fast.fast_path();
        let first = fp.test_run(&frame, ingress, 1).unwrap_or_else(|e| panic!("{e}"));
        assert!(want.contains(&first.action), "{name}: action {} (wanted {want:?})", first.action);
        let mut total = 0u64;
        for _ in 0..CALLS {
            total += fp.test_run(&frame, ingress, 1).unwrap_or_else(|e| panic!("{e}")).ns_per_run;
        }
        println!("{name:<36} {:>10.1}", total as f64 / f64::from(CALLS));
    }
}
