//! systemd service notification (`sd_notify(3)`), what the unit's
//! `Type=notify` waits for: `READY=1` once the device, the workers and the
//! listeners are up; `RELOADING=1` (with `MONOTONIC_USEC`) when a reload
//! starts and `READY=1` again when it has ended, applied or rejected;
//! `STOPPING=1` when the daemon begins to stop. Each also carries a
//! one-line `STATUS=` that `systemctl status` shows.
//!
//! Nothing is sent when `NOTIFY_SOCKET` is unset (the daemon was not
//! started by systemd); a failure to send is logged, never fatal.

use sd_notify::NotifyState;

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot notify the service manager (NOTIFY_SOCKET): {e}");
    }
}

/// The daemon is up (or back up after a reload): `READY=1`.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A reload begins: `RELOADING=1` with the monotonic time systemd needs to
/// match it to the `READY=1` that ends it.
pub fn reloading() {
    let mut states = vec![NotifyState::Reloading, NotifyState::Status("reloading the configuration")];
    if let Ok(t) = NotifyState::monotonic_usec_now() {
        states.push(t);
    }
    send(&states);
}

/// The daemon begins to stop: `STOPPING=1`.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixDatagram;

    // One test touches NOTIFY_SOCKET: the environment is process-wide.
    #[test]
    fn messages_reach_the_notify_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(std::time::Duration::from_secs(2))).unwrap();
        // No other test of this crate reads NOTIFY_SOCKET.
        std::env::set_var("NOTIFY_SOCKET", &path);
        let mut buf = [0u8; 512];
        let mut recv = || {
            let n = sock.recv(&mut buf).unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        };
        super::ready("running: siit");
        assert_eq!(recv(), "READY=1\nSTATUS=running: siit\n");
        super::reloading();
        let m = recv();
        assert!(m.starts_with("RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC="), "{m}");
        let usec: u64 = m.trim_end().rsplit('=').next().unwrap().parse().unwrap();
        assert!(usec > 0);
        super::stopping();
        assert_eq!(recv(), "STOPPING=1\nSTATUS=stopping\n");
        std::env::remove_var("NOTIFY_SOCKET");
        // Without NOTIFY_SOCKET nothing is sent and nothing fails.
        super::ready("x");
        sock.set_nonblocking(true).unwrap();
        assert!(sock.recv(&mut buf).is_err());
    }
}
