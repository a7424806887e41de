//! CPU placement of the testers' threads and the devices under test.

use anyhow::{bail, Context as _, Result};

/// Parses a taskset-style CPU list ("0", "0-1", "0,2-3").
pub fn parse_cpus(s: &str) -> Result<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (
                    a.trim().parse().with_context(|| format!("bad CPU range {part:?}"))?,
                    b.trim().parse().with_context(|| format!("bad CPU range {part:?}"))?,
                );
                if a > b {
                    bail!("bad CPU range {part:?}");
                }
                v.extend(a..=b);
            }
            None => v.push(part.parse().with_context(|| format!("bad CPU {part:?}"))?),
        }
    }
    Ok(v)
}

/// Pins the calling thread to `cpus` (no-op when empty).
pub fn pin_thread(cpus: &[usize]) -> Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        set.set(c).with_context(|| format!("CPU {c}"))?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .with_context(|| format!("pinning a tester thread to CPU(s) {cpus:?}"))?;
    Ok(())
}

/// Priority of real-time tester threads and relays (`--realtime`).
pub const RT_PRIORITY: i32 = 10;

/// Pins the calling thread to `cpus` and, with `realtime`, makes it
/// SCHED_FIFO priority [`RT_PRIORITY`].
pub fn setup_thread(cpus: &[usize], realtime: bool) -> Result<()> {
    pin_thread(cpus)?;
    if realtime {
        crate::sys::set_fifo(RT_PRIORITY).context("SCHED_FIFO for a tester thread")?;
    }
    Ok(())
}

/// The command prefix that runs a process on `cpus` (taskset list), under
/// SCHED_FIFO [`RT_PRIORITY`] with `realtime`: `[chrt -f 10] taskset -c CPUS`.
pub fn placement(cpus: &str, realtime: bool) -> Vec<String> {
    let mut v = Vec::new();
    if realtime {
        v.extend(["chrt".to_owned(), "-f".to_owned(), RT_PRIORITY.to_string()]);
    }
    v.extend(["taskset".to_owned(), "-c".to_owned(), cpus.to_owned()]);
    v
}

/// Threaded NAPI on `dev` in `ns` (`/sys/class/net/DEV/threaded`, written
/// from inside the namespace, whose sysfs `ip netns exec` mounts): the
/// device's receive work (for a veth: the frames its peer transmitted, the
/// XDP program attached to it, IP forwarding, socket delivery) then runs in
/// a kernel thread `napi/DEV-ID` that [`pin_napi`] places, instead of in
/// the softirq of whichever CPU transmitted into the veth. A veth has NAPI
/// only with GRO or an XDP program on it; without, the kernel refuses.
pub fn threaded_napi(ns: &lab::netns::Netns, dev: &str) -> Result<()> {
    ns.exec("sh", &["-c", &format!("echo 1 > /sys/class/net/{dev}/threaded")])
        .with_context(|| format!("threaded NAPI on {dev} in {} (does it have NAPI: GRO or XDP?)", ns.name()))?;
    Ok(())
}

/// Receive Packet Steering on `dev` in `ns`: the receive work after the
/// device's NAPI poll (IP forwarding, socket delivery, the way into a TUN
/// device) goes to the backlog of one of `cpus` instead of running in the
/// softirq of the CPU that polled. For a veth that is the CPU that
/// transmitted into its peer; the NAPI poll itself (GRO, an XDP program on
/// `dev`) stays there. Written to every receive queue's `rps_cpus` from
/// inside the namespace.
pub fn rps(ns: &lab::netns::Netns, dev: &str, cpus: &[usize]) -> Result<()> {
    let mask = cpu_mask(cpus)?;
    ns.exec(
        "sh",
        &[
            "-c",
            &format!("for q in /sys/class/net/{dev}/queues/rx-*; do echo {mask:x} > \"$q/rps_cpus\" || exit 1; done"),
        ],
    )
    .with_context(|| format!("RPS on {dev} in {} to CPU(s) {cpus:?}", ns.name()))?;
    Ok(())
}

/// The hexadecimal CPU mask of `cpus` (at most 64 CPUs).
fn cpu_mask(cpus: &[usize]) -> Result<u64> {
    if cpus.is_empty() {
        bail!("an empty CPU list");
    }
    cpus.iter().try_fold(0u64, |m, &c| if c < 64 { Ok(m | 1 << c) } else { bail!("CPU {c}: masks up to 63") })
}

/// Whether a thread's name is the NAPI kernel thread of one of `devs`
/// (`napi/DEV-ID`).
fn is_napi_of(comm: &str, devs: &[&str]) -> bool {
    comm.strip_prefix("napi/")
        .and_then(|rest| rest.rsplit_once('-'))
        .is_some_and(|(dev, id)| devs.contains(&dev) && !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

/// Pins the NAPI kernel threads of the devices named `devs` (any
/// namespace: the names are the bench topology's own) to `cpus` and, with
/// `fifo`, makes them SCHED_FIFO at that priority (above a real-time relay
/// on the same CPU, as softirq work is). Returns how many threads it
/// placed. Threads come and go with the device's NAPI (an XDP attach can
/// renew them), so callers place them before each trial.
pub fn pin_napi(devs: &[&str], cpus: &[usize], fifo: Option<i32>) -> Result<usize> {
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        set.set(c).with_context(|| format!("CPU {c}"))?;
    }
    let mut n = 0;
    for e in std::fs::read_dir("/proc").context("/proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) else { continue };
        if !is_napi_of(comm.trim_end(), devs) {
            continue;
        }
        let p = nix::unistd::Pid::from_raw(pid);
        if !cpus.is_empty() {
            nix::sched::sched_setaffinity(p, &set)
                .with_context(|| format!("pinning {} to {cpus:?}", comm.trim_end()))?;
        }
        if let Some(prio) = fifo {
            crate::sys::set_fifo_of(pid, prio).with_context(|| format!("SCHED_FIFO for {}", comm.trim_end()))?;
        }
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpus("0").unwrap(), vec![0]);
        assert_eq!(parse_cpus("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert_eq!(parse_cpus(" 1 , 3-3 ").unwrap(), vec![1, 3]);
        assert!(parse_cpus("2-1").is_err());
        assert!(parse_cpus("x").is_err());
        assert!(parse_cpus("").unwrap().is_empty());
    }

    #[test]
    fn cpu_masks() {
        assert_eq!(cpu_mask(&[1]).unwrap(), 0x2);
        assert_eq!(cpu_mask(&[0, 1, 5]).unwrap(), 0x23);
        assert!(cpu_mask(&[]).is_err());
        assert!(cpu_mask(&[64]).is_err());
    }

    #[test]
    fn napi_thread_names() {
        assert!(is_napi_of("napi/r6-8195", &["r6", "r4"]));
        assert!(is_napi_of("napi/r4-1", &["r6", "r4"]));
        assert!(!is_napi_of("napi/r66-8195", &["r6"]));
        assert!(!is_napi_of("napi/r6-", &["r6"]));
        assert!(!is_napi_of("napi/r6-12x", &["r6"]));
        assert!(!is_napi_of("kworker/r6-1", &["r6"]));
        // Device names with dashes keep them.
        assert!(is_napi_of("napi/v-r6-77", &["v-r6"]));
    }

    #[test]
    fn placement_prefix() {
        assert_eq!(placement("1", false), ["taskset", "-c", "1"]);
        assert_eq!(placement("0-1", true), ["chrt", "-f", "10", "taskset", "-c", "0-1"]);
    }

    #[test]
    fn pinning_to_no_cpu_is_a_no_op_and_a_bad_cpu_an_error() {
        pin_thread(&[]).unwrap();
        assert!(std::thread::spawn(|| pin_thread(&[100_000])).join().unwrap().is_err());
    }
}
