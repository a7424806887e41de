//! `io`: how the workers of a table move packets in and out.

use core::fmt;
use core::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::alias::Alias;

/// How the workers of a table move packets: `io = "uring"` or
/// `io = "poll"` (`[tun] io`, `[trgw] io`). Each table picks its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoMode {
    /// io_uring: reads kept posted in the submission ring, completions
    /// reaped in batches, one system call per batch.
    Uring,
    /// Readiness: non-blocking reads and writes (`read(2)`/`write(2)` on
    /// the TUN, `recvmmsg(2)`/`sendmmsg(2)` on sockets), sleeping in
    /// `poll(2)` or `epoll(7)` when idle.
    Poll,
}

impl IoMode {
    /// The spellings, in the order of the variants.
    pub const NAMES: [&'static str; 2] = ["uring", "poll"];

    /// Older spellings of the values (`[trgw] io` used to say `"io-uring"`
    /// and `"epoll"`), accepted by every table with an `io` key, with a
    /// deprecation warning.
    pub const ALIASES: &'static [Alias] = &[
        Alias::Value { key: "io", old: "io-uring", new: "uring" },
        Alias::Value { key: "io", old: "epoll", new: "poll" },
    ];

    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IoMode::Uring => Self::NAMES[0],
            IoMode::Poll => Self::NAMES[1],
        }
    }
}

impl fmt::Display for IoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for IoMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uring" => Ok(IoMode::Uring),
            "poll" => Ok(IoMode::Poll),
            _ => Err(format!("`{s}` is not \"uring\" or \"poll\"")),
        }
    }
}

impl<'de> Deserialize<'de> for IoMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for IoMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip() {
        for m in [IoMode::Uring, IoMode::Poll] {
            assert_eq!(m.as_str().parse::<IoMode>(), Ok(m));
            assert_eq!(m.to_string(), m.as_str());
        }
        let e = "epoll".parse::<IoMode>().unwrap_err();
        assert!(e.contains("\"uring\" or \"poll\""), "{e}");
        for a in IoMode::ALIASES {
            let Alias::Value { new, .. } = a else { panic!("{a:?}") };
            assert!(new.parse::<IoMode>().is_ok(), "alias to an unknown spelling: {a:?}");
        }
    }
}
