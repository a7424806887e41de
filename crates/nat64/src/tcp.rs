//! RFC 6146 §3.5.2.2: the TCP session state machine, as a pure function of
//! the current state, the direction and the flags of a packet.

use serde::Serialize;

/// TCP session states (RFC 6146 §3.5.2.2; CLOSED is "no session").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TcpState {
    /// An IPv4 SYN opened the session; waiting for the IPv6 SYN.
    V4Init,
    /// An IPv6 SYN opened the session; waiting for the IPv4 SYN.
    V6Init,
    /// Both SYNs seen.
    Established,
    /// A FIN came from the IPv4 side.
    V4FinRcv,
    /// A FIN came from the IPv6 side.
    V6FinRcv,
    /// FINs came from both sides.
    V4FinV6FinRcv,
    /// Transitory: after an RST, or an established session that timed out.
    Trans,
}

impl TcpState {
    /// Name as in `v6gate ctl` output.
    pub fn as_str(self) -> &'static str {
        match self {
            TcpState::V4Init => "v4-init",
            TcpState::V6Init => "v6-init",
            TcpState::Established => "established",
            TcpState::V4FinRcv => "v4-fin-rcv",
            TcpState::V6FinRcv => "v6-fin-rcv",
            TcpState::V4FinV6FinRcv => "v4-fin-v6-fin-rcv",
            TcpState::Trans => "trans",
        }
    }
}

/// Which side a packet came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// From the IPv6 network.
    V6,
    /// From the IPv4 network.
    V4,
}

/// TCP flag bits.
pub const FIN: u8 = 0x01;
/// SYN.
pub const SYN: u8 = 0x02;
/// RST.
pub const RST: u8 = 0x04;

/// What happens to the session lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// Unchanged.
    Keep,
    /// Set to `tcp-est-timeout`.
    Est,
    /// Set to `tcp-trans-timeout`.
    Trans,
}

/// One transition: the state after a packet from `side` with `flags`.
/// `rst_in_fin` is `handle-rst-during-fin-rcv`.
pub fn step(state: TcpState, side: Side, flags: u8, rst_in_fin: bool) -> (TcpState, Lifetime) {
    use TcpState::*;
    let syn = flags & SYN != 0;
    let fin = flags & FIN != 0;
    let rst = flags & RST != 0;
    match state {
        // "If a V6 SYN packet is received ... ESTABLISHED"; anything else is
        // translated without a state change.
        V4Init if side == Side::V6 && syn => (Established, Lifetime::Est),
        V4Init => (V4Init, Lifetime::Keep),
        // "If a V4 SYN packet is received ... ESTABLISHED"; a retransmitted
        // V6 SYN refreshes the transitory lifetime.
        V6Init if side == Side::V4 && syn => (Established, Lifetime::Est),
        V6Init if side == Side::V6 && syn => (V6Init, Lifetime::Trans),
        V6Init => (V6Init, Lifetime::Keep),
        Established if rst => (Trans, Lifetime::Trans),
        Established if fin && side == Side::V4 => (V4FinRcv, Lifetime::Est),
        Established if fin => (V6FinRcv, Lifetime::Est),
        Established => (Established, Lifetime::Est),
        V4FinRcv if fin && side == Side::V6 => (V4FinV6FinRcv, Lifetime::Trans),
        V6FinRcv if fin && side == Side::V4 => (V4FinV6FinRcv, Lifetime::Trans),
        V4FinRcv | V6FinRcv if rst && rst_in_fin => (Trans, Lifetime::Trans),
        V4FinRcv | V6FinRcv => (state, Lifetime::Est),
        // "All packets are translated"; the session dies with its lifetime.
        V4FinV6FinRcv => (V4FinV6FinRcv, Lifetime::Keep),
        // "If a packet other than a RST packet is received, the lifetime of
        // the session is set to TCP_EST and the state is ESTABLISHED."
        Trans if rst => (Trans, Lifetime::Keep),
        Trans => (Established, Lifetime::Est),
    }
}

/// What happens when a session's lifetime runs out: established-like
/// states go to TRANS with the transitory lifetime (RFC 6146 §3.5.2.2;
/// v6gate sends no keep-alive probe), the others are deleted (`None`).
pub fn on_timeout(state: TcpState) -> Option<TcpState> {
    match state {
        TcpState::Established | TcpState::V4FinRcv | TcpState::V6FinRcv => Some(TcpState::Trans),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Side::*;
    use TcpState::*;

    #[test]
    fn every_transition() {
        let t = |s, side, f| step(s, side, f, false);
        // V4 INIT
        assert_eq!(t(V4Init, V6, SYN), (Established, Lifetime::Est));
        assert_eq!(t(V4Init, V4, SYN), (V4Init, Lifetime::Keep));
        assert_eq!(t(V4Init, V6, 0x10), (V4Init, Lifetime::Keep));
        // V6 INIT
        assert_eq!(t(V6Init, V4, SYN | 0x10), (Established, Lifetime::Est));
        assert_eq!(t(V6Init, V6, SYN), (V6Init, Lifetime::Trans));
        assert_eq!(t(V6Init, V4, 0x10), (V6Init, Lifetime::Keep));
        // ESTABLISHED
        assert_eq!(t(Established, V4, FIN), (V4FinRcv, Lifetime::Est));
        assert_eq!(t(Established, V6, FIN | 0x10), (V6FinRcv, Lifetime::Est));
        assert_eq!(t(Established, V6, RST), (Trans, Lifetime::Trans));
        assert_eq!(t(Established, V4, RST), (Trans, Lifetime::Trans));
        assert_eq!(t(Established, V4, 0x10), (Established, Lifetime::Est));
        // FIN RCV states
        assert_eq!(t(V4FinRcv, V6, FIN), (V4FinV6FinRcv, Lifetime::Trans));
        assert_eq!(t(V4FinRcv, V4, FIN), (V4FinRcv, Lifetime::Est));
        assert_eq!(t(V6FinRcv, V4, FIN), (V4FinV6FinRcv, Lifetime::Trans));
        assert_eq!(t(V6FinRcv, V6, 0x10), (V6FinRcv, Lifetime::Est));
        assert_eq!(t(V4FinRcv, V4, RST), (V4FinRcv, Lifetime::Est));
        assert_eq!(step(V4FinRcv, V4, RST, true), (Trans, Lifetime::Trans));
        assert_eq!(step(V6FinRcv, V6, RST, true), (Trans, Lifetime::Trans));
        // V4 FIN + V6 FIN RCV
        assert_eq!(t(V4FinV6FinRcv, V4, 0x10), (V4FinV6FinRcv, Lifetime::Keep));
        assert_eq!(t(V4FinV6FinRcv, V6, RST), (V4FinV6FinRcv, Lifetime::Keep));
        // TRANS
        assert_eq!(t(Trans, V4, RST), (Trans, Lifetime::Keep));
        assert_eq!(t(Trans, V6, 0x10), (Established, Lifetime::Est));
    }

    #[test]
    fn timeouts() {
        assert_eq!(on_timeout(Established), Some(Trans));
        assert_eq!(on_timeout(V4FinRcv), Some(Trans));
        assert_eq!(on_timeout(V6FinRcv), Some(Trans));
        for s in [V4Init, V6Init, V4FinV6FinRcv, Trans] {
            assert_eq!(on_timeout(s), None, "{s:?}");
        }
    }
}
