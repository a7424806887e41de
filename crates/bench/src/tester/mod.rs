//! The testers: what a trial sends, how it is paced and judged (shared by
//! every backend), and the backends that move the packets.
//!
//! A backend only moves packets: it sends the trial's packets on the
//! [`Pacer`](crate::harness::clock::Pacer)'s schedule with each packet's
//! index and send time in its payload, and feeds what comes back into a
//! [`Tally`], which judges each packet and yields the [`Outcome`]. The
//! trials, the search for the zero-loss rate and the reports above it are
//! the same whatever the backend.
//!
//! - Frame testers ([`FrameTester`], for `bench xlat`): whole Ethernet
//!   frames from [`frame`] templates on the tester ports of the RFC 8219
//!   topology. Today [`afpacket::AfPacket`] (`AF_PACKET` sockets, batched
//!   `sendmmsg`/`recvmmsg`); a new backend (e.g. XDP: `BPF_PROG_RUN` live
//!   frames / AF_XDP and a counting XDP receiver) implements
//!   [`FrameTester`] and gets a [`Backend`] value, nothing else.
//! - The UDP stream tester ([`udp`], for `bench trgw`): RTP [`probe`]s
//!   from UDP sockets, through a media relay that latches on the sockets'
//!   addresses.

pub mod afpacket;
pub mod frame;
pub mod probe;
mod tally;
pub mod udp;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

pub use tally::{Outcome, SendStats, Tally, Verdict};

/// One end of a frame trial: namespace and interface.
#[derive(Debug, Clone)]
pub struct Port {
    /// Namespace name (`ip netns`).
    pub ns: String,
    /// Interface inside it.
    pub ifname: String,
    /// CPUs to pin the thread to (none: not pinned).
    pub cpus: Vec<usize>,
}

/// What to send in one frame trial.
#[derive(Debug, Clone)]
pub struct TrialSpec {
    /// Sending end.
    pub tx: Port,
    /// Receiving end.
    pub rx: Port,
    /// One frame template per flow; frames cycle through them.
    pub flows: Arc<Vec<frame::Template>>,
    /// Target rate, frames per second.
    pub rate_pps: f64,
    /// Number of frames to send (the trial's duration is frames / rate).
    pub frames: u64,
    /// How long the receiver keeps reading after the last frame was sent.
    pub drain: Duration,
    /// A frame arriving later than this after it was sent counts as lost.
    pub late: Duration,
    /// Trial id, carried in the payload (a straggler of an earlier trial
    /// is never counted).
    pub id: u16,
    /// Record each flow's translated source address and port (NAT64 learning).
    pub learn: bool,
    /// Frames per send call.
    pub batch: usize,
    /// Count only received frames of this IP version (true: IPv6), so a
    /// frame that bypassed the translator is never taken for a translated one.
    pub rx_v6: bool,
}

/// What one frame trial measured.
#[derive(Debug, Clone, Default)]
pub struct TrialResult {
    /// Loss, latency, achieved rate.
    pub outcome: Outcome,
    /// Per flow: the source address and port the receiver saw first (with
    /// `learn`).
    pub seen_src: Vec<Option<(IpAddr, u16)>>,
}

/// A frame tester backend: runs one trial of [`TrialSpec`] between two
/// tester ports.
pub trait FrameTester: std::fmt::Debug + Send + Sync {
    /// Runs the trial.
    fn run_trial(&self, spec: &TrialSpec) -> Result<TrialResult>;
}

/// The frame tester backends (`bench xlat --tester`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// `AF_PACKET` sockets with batched `sendmmsg`/`recvmmsg`.
    #[default]
    AfPacket,
}

impl Backend {
    /// The backend's tester.
    pub fn tester(self) -> Box<dyn FrameTester> {
        match self {
            Backend::AfPacket => Box::new(afpacket::AfPacket),
        }
    }
}
