//! Keeping the own-address list current: a thread that waits on a route
//! netlink socket joined to the address groups and re-reads the list
//! when the kernel announces a change, and every backstop interval in
//! any case. The sockets are opened once and kept, so a process out of
//! descriptors can still re-read; when a reading fails anyway the
//! gateway fails closed and the thread retries every quarter second.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netsys::netlink::{AddrEvents, Netlink};

use crate::gateway::Gateway;

/// The default backstop: re-read at least this often.
pub const DEFAULT_BACKSTOP: Duration = Duration::from_secs(10);

/// How long one wait lasts (the stop flag and failed readings are looked
/// at this often).
const STEP: Duration = Duration::from_millis(250);

/// A running watcher; dropping it stops the thread.
#[derive(Debug)]
pub struct Watch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    pub(crate) fn start(gw: Arc<Gateway>, backstop: Duration) -> io::Result<Watch> {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        // Opened here, so the first wait already hears changes.
        let events = AddrEvents::open();
        let dump = Netlink::open();
        let thread = std::thread::Builder::new()
            .name("dstpolicy-watch".into())
            .spawn(move || run(&gw, backstop, events, dump, &st))?;
        Ok(Watch { stop, thread: Some(thread) })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(gw: &Gateway, backstop: Duration, events: io::Result<AddrEvents>, dump: io::Result<Netlink>, stop: &AtomicBool) {
    let mut events = events
        .map_err(|e| tracing::warn!(error = %e, "cannot listen for address changes: the host's addresses are re-read periodically only"))
        .ok();
    let mut dump = dump.ok();
    let mut due = Instant::now() + backstop;
    while !stop.load(Relaxed) {
        let heard = match events.as_mut() {
            Some(ev) => ev.wait(STEP).unwrap_or_else(|e| {
                tracing::debug!(error = %e, "address change socket failed; reopening");
                events = None;
                true
            }),
            None => {
                std::thread::sleep(STEP);
                false
            }
        };
        let now = Instant::now();
        if !(heard || now >= due || gw.stale()) {
            continue;
        }
        if events.is_none() {
            events = AddrEvents::open().ok();
        }
        let reading = match dump.as_mut() {
            Some(nl) => nl.addresses(),
            None => Netlink::open().and_then(|mut nl| {
                let r = nl.addresses();
                dump = Some(nl);
                r
            }),
        };
        if reading.is_err() {
            // A fresh socket next time (this one may be out of step).
            dump = None;
        }
        gw.apply(reading);
        due = now + backstop;
    }
}
