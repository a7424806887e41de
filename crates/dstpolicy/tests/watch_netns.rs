//! The own-address list follows the kernel: an address added to an
//! interface (and its subnet's broadcast address) is refused as soon as
//! the kernel announces it, and accepted again once removed. In a
//! network namespace of its own (tests run as root).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dstpolicy::{Gateway, Lists, Policy, Reason, Spec};
use lab::netns::Netns;

/// Waits (up to a minute: a failure, not a measure) for `f`.
fn wait_for(what: &str, f: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn addresses_added_and_removed_are_seen_through_netlink() {
    let a = Netns::unique("dstp").expect("namespace (tests run as root)");
    let b = Netns::unique("dstp").expect("namespace");
    let (ia, ib) = (format!("dp{}a", std::process::id() % 100_000), format!("dp{}b", std::process::id() % 100_000));
    lab::netns::veth(&a, &ia, &b, &ib).expect("veth");
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    a.run(|| {
        let gw = Gateway::of_host(Spec::default());
        // A backstop far longer than the test: only the kernel's
        // announcements can make the list change in time.
        let _watch = gw.watch(Duration::from_secs(3600))?;
        let p = Arc::new(Policy::new("test", gw.clone(), Lists::default()));
        assert_eq!(p.judge(ip("198.18.5.1")), Ok(()), "not yet an address of the host");
        let refusal = |s: &str| p.judge(ip(s)).err().map(|r| r.reason);
        a.ip(&["addr", "add", "198.18.5.1/24", "dev", &ia])?;
        a.ip(&["addr", "add", "2001:db8:5::1/64", "dev", &ia, "nodad"])?;
        wait_for("the new addresses to be own", || {
            refusal("198.18.5.1") == Some(Reason::Own) && refusal("2001:db8:5::1") == Some(Reason::Own)
        });
        assert_eq!(refusal("198.18.5.255"), Some(Reason::DirectedBroadcast));
        assert_eq!(refusal("64:ff9b::198.18.5.1"), Some(Reason::Own), "and through the well-known prefix");
        assert_eq!(p.judge(ip("198.18.5.2")), Ok(()), "a neighbour is not own");
        a.ip(&["addr", "del", "198.18.5.1/24", "dev", &ia])?;
        a.ip(&["addr", "del", "2001:db8:5::1/64", "dev", &ia])?;
        wait_for("the removed addresses to be judged again", || {
            p.judge(ip("198.18.5.1")).is_ok() && p.judge(ip("2001:db8:5::1")).is_ok()
        });
        assert_eq!(p.judge(ip("198.18.5.255")), Ok(()), "no subnet, no directed broadcast");
        let st = gw.status();
        assert!(!st.stale);
        assert!(st.refreshes >= 3, "read at start and after each change: {st:?}");
        Ok(())
    })
    .unwrap();
}
