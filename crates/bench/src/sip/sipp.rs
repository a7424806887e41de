//! SIPp as the call generator of `bench sip`: the two scenarios (the
//! caller logs the instant before its INVITE leaves, the callee the
//! instant the ACK arrives), their command lines, and reading back what a
//! run logged (call setup times joined by Call-ID, SIPp's own call
//! counts).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result};
use lab::netns::Netns;

const UAC: &str = include_str!("uac.xml");
const UAS: &str = include_str!("uas.xml");

/// The callee's SIP port and its RTP echo port.
pub const UAS_PORT: u16 = 5090;
pub const UAS_RTP: u16 = 6000;
/// The caller's SIP port and its RTP port base.
pub const UAC_PORT: u16 = 5070;
pub const UAC_RTP: u16 = 16000;

/// The caller's scenario: with `media`, G.711 RTP from `audio` (a PCMU
/// file) for `hold_ms` between the ACK and the BYE; without, the BYE
/// follows the ACK at once (the call-rate trials).
pub fn uac_scenario(media: Option<(&Path, u64)>) -> String {
    let block = match media {
        Some((audio, hold_ms)) => format!(
            "  <nop><action><exec rtp_stream=\"{},-1,0\"/></action></nop>\n  <pause milliseconds=\"{hold_ms}\"/>\n  \
             <nop><action><exec rtp_stream=\"pause\"/></action></nop>",
            audio.display()
        ),
        None => String::new(),
    };
    UAC.replace("@MEDIA@", &block)
}

/// The callee's scenario.
pub fn uas_scenario() -> &'static str {
    UAS
}

/// A host as written in a SIP URI (`[v6]` or `v4`).
pub fn uri_host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(a) => format!("[{a}]"),
        IpAddr::V4(a) => a.to_string(),
    }
}

/// One SIPp process's command: `scenario` in `ns` on `ip:port`, UDP one
/// socket, no keyboard, the log actions into `log` and the error trace into
/// `<log>.err`; `place`: the CPU placement prefix (`taskset -c ...`).
pub fn command(
    ns: &Netns,
    place: &[String],
    sipp: &Path,
    scenario: &Path,
    ip: IpAddr,
    port: u16,
    log: &Path,
) -> Command {
    let mut c = ns.command(&place[0]);
    c.args(&place[1..]).arg(sipp);
    c.arg("-sf").arg(scenario).args(["-i", &ip.to_string(), "-p", &port.to_string(), "-t", "u1", "-nostdin"]);
    c.args(["-key", "me", &uri_host(ip), "-key", "mip", &ip.to_string()]);
    c.args(["-key", "fam", if ip.is_ipv4() { "4" } else { "6" }]);
    // Socket buffers of 8 MiB (SIPp's default is 64 KiB: bursts at
    // thousands of calls per second would be dropped by the tester itself).
    c.args(["-buff_size", "8388608"]);
    c.arg("-trace_logs").arg("-log_file").arg(log);
    c.arg("-trace_err").arg("-error_file").arg(PathBuf::from(format!("{}.err", log.display())));
    c
}

/// The callee on `ip`:`port`: `calls` calls, echoing RTP on [`UAS_RTP`].
pub fn uas(
    ns: &Netns,
    place: &[String],
    sipp: &Path,
    scenario: &Path,
    (ip, port): (IpAddr, u16),
    calls: u64,
    log: &Path,
) -> Command {
    let mut c = command(ns, place, sipp, scenario, ip, port, log);
    c.args(["-m", &calls.to_string(), "-mi", &ip.to_string(), "-mp", &UAS_RTP.to_string(), "-rtp_echo"]);
    c
}

/// The caller on `ip`:`port`: `calls` calls at `rate` per second to
/// `sip:uas@<callee>`, sent to `next_hop` (the gateway, or the callee
/// itself for a direct call); every call must end within `timeout_s`.
#[allow(clippy::too_many_arguments)]
pub fn uac(
    ns: &Netns,
    place: &[String],
    sipp: &Path,
    scenario: &Path,
    (ip, port): (IpAddr, u16),
    callee: SocketAddr,
    next_hop: SocketAddr,
    calls: u64,
    rate: u32,
    timeout_s: u64,
    log: &Path,
) -> Command {
    let mut c = command(ns, place, sipp, scenario, ip, port, log);
    let ruri = format!("sip:uas@{}:{}", uri_host(callee.ip()), callee.port());
    c.args(["-key", "ruri", &ruri, "-m", &calls.to_string(), "-r", &rate.to_string()]);
    // No cap below the offered load on calls in progress.
    c.args(["-l", &(u64::from(rate) * 10 + 100).to_string()]);
    c.args(["-mi", &ip.to_string(), "-mp", &UAC_RTP.to_string()]);
    c.args(["-timeout", &format!("{timeout_s}s"), "-timeout_error"]);
    c.arg(next_hop.to_string());
    c
}

/// The "<word> <call-id> <date> <time> <epoch.usec>" lines of a SIPp log
/// (`[timestamp]`): Call-ID → epoch microseconds, for `word`.
pub fn stamps(log: &str, word: &str) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for l in log.lines() {
        let mut f = l.split_whitespace();
        if f.next() != Some(word) {
            continue;
        }
        let (Some(id), Some(epoch)) = (f.next(), f.nth(2)) else { continue };
        let Some((s, us)) = epoch.split_once('.') else { continue };
        if let (Ok(s), Ok(us)) = (s.parse::<u64>(), us.parse::<u64>()) {
            m.insert(id.to_owned(), s * 1_000_000 + us);
        }
    }
    m
}

/// Call setup times in microseconds (INVITE sent by the caller → ACK
/// received by the callee), per call found in both logs.
pub fn setup_times(uac_log: &Path, uas_log: &Path) -> Result<Vec<u64>> {
    let read = |p: &Path| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    let (inv, ack) = (stamps(&read(uac_log)?, "invite"), stamps(&read(uas_log)?, "ack"));
    let mut v: Vec<u64> = inv.iter().filter_map(|(id, t0)| ack.get(id).map(|t1| t1.saturating_sub(*t0))).collect();
    v.sort_unstable();
    Ok(v)
}

/// How SIPp kept to its schedule of `rate` calls per second, from the
/// INVITE instants of its log (epoch microseconds, any order): the INVITE
/// rate it achieved (calls per second from the first INVITE to one
/// interval after the last) and the lag p99 of INVITE `i` behind its turn,
/// `first + i / rate` (µs). `None` with fewer than two INVITEs.
pub fn invite_pacing(mut sent_us: Vec<u64>, rate: u32) -> Option<(f64, u64)> {
    if sent_us.len() < 2 || rate == 0 {
        return None;
    }
    sent_us.sort_unstable();
    let (first, n) = (sent_us[0], sent_us.len());
    let interval_us = 1e6 / f64::from(rate);
    let span_us = (sent_us[n - 1] - first) as f64 + interval_us;
    let mut lag: Vec<u64> =
        sent_us.iter().enumerate().map(|(i, t)| (t - first).saturating_sub((i as f64 * interval_us) as u64)).collect();
    lag.sort_unstable();
    let p99 = lag[((n - 1) as f64 * 0.99).round() as usize];
    Some((n as f64 * 1e6 / span_us, p99))
}

/// SIPp's final "Successful call" and "Failed call" counts (cumulative
/// column) from its screen output.
pub fn call_counts(screen: &str) -> Option<(u64, u64)> {
    let last = |name: &str| {
        screen.lines().rev().find(|l| l.trim_start().starts_with(name)).and_then(|l| {
            l.split('|').nth(2).and_then(|c| c.split_whitespace().next()).and_then(|n| n.parse::<u64>().ok())
        })
    };
    Some((last("Successful call")?, last("Failed call")?))
}

/// SIPp's final cumulative "Call Rate" (calls per second over its run,
/// from its first call to its last call's end).
pub fn call_rate(screen: &str) -> Option<f64> {
    let l = screen.lines().rev().find(|l| l.trim_start().starts_with("Call Rate"))?;
    l.split('|').nth(2)?.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_with_and_without_media() {
        let m = uac_scenario(Some((Path::new("/w/a.pcmu"), 2000)));
        assert!(m.contains("rtp_stream=\"/w/a.pcmu,-1,0\"") && m.contains("<pause milliseconds=\"2000\"/>"));
        let n = uac_scenario(None);
        assert!(!n.contains("rtp_stream") && !n.contains("@MEDIA@") && n.contains("log message=\"invite"));
        assert!(uas_scenario().contains("log message=\"ack [call_id] [timestamp]\""));
    }

    #[test]
    fn setup_times_join_the_two_logs_by_call_id() {
        let dir = std::env::temp_dir().join(format!("v6gate-sipp-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("uac.log"), dir.join("uas.log"));
        std::fs::write(
            &a,
            "invite 1-9@h 2026-11-23\t14:43:59.550806\t1795445039.550806\n\
             invite 2-9@h 2026-11-23\t14:43:59.650000\t1795445039.650000\n\
             invite 3-9@h 2026-11-23\t14:43:59.750000\t1795445039.750000\n",
        )
        .unwrap();
        std::fs::write(
            &b,
            "ack 2-9@h 2026-11-23\t14:43:59.651500\t1795445039.651500\n\
             ack 1-9@h 2026-11-23\t14:43:59.551806\t1795445039.551806\n",
        )
        .unwrap();
        let t = setup_times(&a, &b);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(t.unwrap(), vec![1000, 1500], "call 3 never got its ACK: not a sample");
    }

    #[test]
    fn invite_pacing_from_the_log() {
        // 1000 calls/s kept: one INVITE a millisecond.
        let kept: Vec<u64> = (0..100).map(|i| 5_000_000 + i * 1000).rev().collect();
        let (rate, lag) = invite_pacing(kept, 1000).unwrap();
        assert!((rate - 1000.0).abs() < 1e-6 && lag == 0, "{rate} {lag}");
        // A caller that sends only one call every 2 ms falls behind: half
        // the rate, and its last INVITEs a hundred milliseconds late.
        let slow: Vec<u64> = (0..100).map(|i| i * 2000).collect();
        let (rate, lag) = invite_pacing(slow, 1000).unwrap();
        assert!((rate - 100.0 * 1e6 / 199_000.0).abs() < 1e-6, "{rate}");
        assert_eq!(lag, 98_000, "INVITE 98 sent at 196 ms, due at 98 ms");
        assert_eq!(invite_pacing(vec![1], 10), None);
    }

    #[test]
    fn final_call_counts() {
        let screen = "  Successful call        |        0                  |        2                 \n\
                      Failed call            |        0                  |        1                 \n";
        assert_eq!(call_counts(screen), Some((2, 1)));
        let rate = "  Call Rate              |    0.000 cps              |    9.434 cps             \n";
        assert_eq!(call_rate(rate), Some(9.434));
        assert_eq!(call_rate(screen), None);
        assert_eq!(call_counts("nothing"), None);
    }
}
