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
