//! A CPU wake-up latency request: the kernel's PM QoS CPU latency limit
//! (`/dev/cpu_dma_latency`, `cpu_latency_qos`). While a request is held,
//! the cpuidle governor puts idle CPUs only into states whose exit
//! latency is within the limit; with 0 they poll instead of halting. The
//! request is the smallest of all held on the machine, and it is dropped
//! when its holder closes the file (or exits).
//!
//! Why a relay wants it: a session through a user-level relay wakes three
//! threads in turn (client, relay, server), and a wake-up onto an idle
//! CPU that halted costs its exit from the halt. In a virtual machine
//! that exit goes through the hypervisor (tens of µs on the Firecracker
//! guests v6gate is measured on; docs/trt.md). It costs power (idle CPUs
//! poll), so it is opt-in.
//!
//! Only safe code: the device takes a native-endian `i32` of µs by
//! `write` and reports the machine's effective limit the same way by
//! `read`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::time::Duration;

/// The PM QoS CPU latency device.
pub const DEVICE: &str = "/dev/cpu_dma_latency";

/// A held request; dropped, it is withdrawn.
#[derive(Debug)]
pub struct CpuLatency {
    _file: File,
    limit: Duration,
}

impl CpuLatency {
    /// Ask that idle CPUs wake within `limit` (whole µs; below 1 µs: 0,
    /// they poll), for as long as the result lives. Needs root (the
    /// device is root's).
    pub fn hold(limit: Duration) -> io::Result<CpuLatency> {
        let us = i32::try_from(limit.as_micros())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{limit:?} is above i32::MAX µs")))?;
        let mut file = OpenOptions::new().write(true).open(DEVICE)?;
        // One write of exactly four bytes is taken as the binary value.
        file.write_all(&us.to_ne_bytes())?;
        Ok(CpuLatency { _file: file, limit: Duration::from_micros(us as u64) })
    }

    /// The limit asked for.
    pub fn limit(&self) -> Duration {
        self.limit
    }
}

/// The machine's effective limit: the smallest request held (the kernel's
/// default, 2000 s, when none is).
pub fn current() -> io::Result<Duration> {
    let mut b = [0u8; 4];
    File::open(DEVICE)?.read_exact(&mut b)?;
    Ok(Duration::from_micros(i32::from_ne_bytes(b).max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_request_bounds_the_machines_limit_until_dropped() {
        lab::need_root!();
        let before = match current() {
            Ok(d) => d,
            // No PM QoS device here (a container without it): nothing
            // to test against.
            Err(e) => lab::skip_test!("{DEVICE}: {e}"),
        };
        let held = CpuLatency::hold(Duration::from_micros(3)).unwrap_or_else(|e| panic!("{DEVICE}: {e}"));
        assert_eq!(held.limit(), Duration::from_micros(3));
        assert!(current().unwrap() <= Duration::from_micros(3), "{:?}", current());
        drop(held);
        // Withdrawn: the limit is what it was (another holder's, or the
        // default), not ours any more unless it was already that low.
        let after = current().unwrap();
        assert!(after == before || before <= Duration::from_micros(3), "{before:?} → {after:?}");
    }

    #[test]
    fn a_limit_beyond_an_i32_of_microseconds_is_refused() {
        let e = CpuLatency::hold(Duration::from_secs(3_000)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
