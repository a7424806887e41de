//! lwAFTR binding lookups with 1,000,000 bindings (issue #15's bar:
//! ≤ 100 ns per lookup). `cargo bench -p softwire --bench binding`.
//!
//! The table is what a large lw4o6 deployment looks like: 15,625 shared
//! IPv4 addresses × 64 PSIDs (psid-length 6, offset 6). Lookups use keys
//! drawn at random over the whole table (so nearly every one misses the
//! CPU caches: 1,000,000 bindings take ~105 MB), both directions:
//! IPv4 (address, port) → lwB4, and the per-packet check of a softwire
//! packet's (lwB4, inner source, port).

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use softwire::binding::{Binding, BindingTable, Check};
use softwire::portset::PsidMap;
use std::net::{Ipv4Addr, Ipv6Addr};

const N: u32 = 1_000_000;

fn table() -> BindingTable {
    let map = PsidMap::new(6, 6).unwrap();
    let mut t = BindingTable::with_capacity(N as usize);
    for i in 0..N {
        let b4 = Ipv6Addr::from((0x2001_0db8_u128 << 96) | (u128::from(i) << 16) | 1);
        t.insert(Binding { b4, ipv4: Ipv4Addr::from(0x0a00_0000 + (i >> 6)), psid: (i & 63) as u16, map }).unwrap();
    }
    t
}

/// xorshift, so the key order is random but the same every run.
fn keys(n: usize) -> Vec<u32> {
    let mut x = 0x9e37_79b9_u32;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % N
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let t = table();
    eprintln!("{} bindings, {} bytes ({} per binding)", t.len(), t.memory_bytes(), t.memory_bytes() / t.len());
    let map = PsidMap::new(6, 6).unwrap();
    let ks = keys(4096);
    let v4: Vec<(Ipv4Addr, u16)> =
        ks.iter().map(|&i| (Ipv4Addr::from(0x0a00_0000 + (i >> 6)), map.nth((i & 63) as u16, i % 1000))).collect();
    let v6: Vec<(Ipv6Addr, Ipv4Addr, u16)> = ks
        .iter()
        .zip(&v4)
        .map(|(&i, &(a, p))| (Ipv6Addr::from((0x2001_0db8_u128 << 96) | (u128::from(i) << 16) | 1), a, p))
        .collect();
    let mut g = c.benchmark_group("binding_1m");
    g.throughput(Throughput::Elements(v4.len() as u64));
    g.bench_function("lookup4_random", |b| {
        b.iter_batched(
            || (),
            |()| {
                let mut hit = 0u32;
                for &(a, p) in &v4 {
                    hit += u32::from(t.lookup4(black_box(a), black_box(p)).is_some());
                }
                assert_eq!(hit as usize, v4.len());
                hit
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("check6_random", |b| {
        b.iter(|| {
            let mut ok = 0u32;
            for (b4, a, p) in &v6 {
                ok += u32::from(t.check(black_box(b4), *a, *p) == Check::Ok);
            }
            assert_eq!(ok as usize, v6.len());
            ok
        })
    });
    // One lookup at a time, each depending on the previous result: the
    // latency of a lookup that misses every cache (no overlap).
    g.throughput(Throughput::Elements(1));
    g.bench_function("lookup4_dependent", |b| {
        let mut i = 0usize;
        b.iter(|| {
            let (a, p) = v4[i % v4.len()];
            let r = t.lookup4(a, p).map_or(0, |b4| b4.segments()[7] as usize);
            i = i.wrapping_add(1 + r);
            r
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
