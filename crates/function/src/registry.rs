//! The registry: the running functions of one process, over the host's
//! whole configuration `G` (gate's `Config`, a standalone command's
//! table). Functions are declared in start order; a reload is planned for
//! every function before any applies; they stop in reverse.

use crate::{Family, FastPath, Function, Reload, ReloadError};

/// A running function as the host sees it (type-erased [`Function`]).
pub trait Entry<G>: Send {
    /// Its key in `/status`.
    fn status_key(&self) -> &'static str;
    /// The functions running.
    fn names(&self) -> Vec<&'static str>;
    /// Whether `new`'s table can be applied ([`Function::plan_reload`]).
    fn plan_reload(&self, cur: &G, new: &G) -> Reload;
    /// Apply `new`'s table.
    fn reload(&mut self, new: &G) -> Result<(), ReloadError>;
    /// Its status, serialised.
    fn status(&self) -> serde_json::Value;
    /// Its metric families.
    fn metrics(&self) -> Vec<Family>;
    /// Its fast-path adapter.
    fn fast_path(&self) -> FastPath;
    /// Stop it; a summary line for the log.
    fn stop(self: Box<Self>) -> Option<String>;
}

struct Slot<F: Function, G> {
    f: F,
    pick: fn(&G) -> Option<&F::Config>,
}

impl<F: Function, G: 'static> Entry<G> for Slot<F, G> {
    fn status_key(&self) -> &'static str {
        self.f.status_key()
    }
    fn names(&self) -> Vec<&'static str> {
        self.f.names()
    }
    fn plan_reload(&self, cur: &G, new: &G) -> Reload {
        match ((self.pick)(cur), (self.pick)(new)) {
            (Some(c), Some(n)) => self.f.plan_reload(c, n),
            // A table the host had no entry for cannot reach here; one
            // removed is a stop, which a reload does not do.
            _ => Reload::NeedsRestart(format!("[{}] removed: restart v6gate to apply", self.f.status_key())),
        }
    }
    fn reload(&mut self, new: &G) -> Result<(), ReloadError> {
        match (self.pick)(new) {
            Some(n) => self.f.reload(n),
            None => Ok(()),
        }
    }
    fn status(&self) -> serde_json::Value {
        serde_json::to_value(self.f.status()).unwrap_or(serde_json::Value::Null)
    }
    fn metrics(&self) -> Vec<Family> {
        self.f.metrics()
    }
    fn fast_path(&self) -> FastPath {
        self.f.fast_path()
    }
    fn stop(self: Box<Self>) -> Option<String> {
        self.f.stop()
    }
}

/// One kind of function the host knows: its status key, the tables that
/// configure it (for messages) and whether a configuration has them.
struct Kind<G> {
    key: &'static str,
    tables: &'static str,
    present: Box<dyn Fn(&G) -> bool + Send + Sync>,
}

/// The running functions of a process, in start order.
pub struct Registry<G> {
    kinds: Vec<Kind<G>>,
    running: Vec<Box<dyn Entry<G>>>,
}

impl<G> Default for Registry<G> {
    fn default() -> Self {
        Registry { kinds: Vec::new(), running: Vec::new() }
    }
}

impl<G: 'static> std::fmt::Debug for Registry<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("running", &self.names()).finish()
    }
}

impl<G: 'static> Registry<G> {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Declare function kind `key` (configured by `tables`, e.g.
    /// `"[dslite], [lw4o6] or [b4]"`) and, when `cfg` has its table
    /// (`pick`), start it with `start`. On error nothing is added (the
    /// host stops what started before: [`Registry::stop`]).
    pub fn start<F: Function, E>(
        &mut self,
        cfg: &G,
        key: &'static str,
        tables: &'static str,
        pick: fn(&G) -> Option<&F::Config>,
        start: impl FnOnce(&F::Config) -> Result<F, E>,
    ) -> Result<(), E> {
        self.kinds.push(Kind { key, tables, present: Box::new(move |g| pick(g).is_some()) });
        if let Some(c) = pick(cfg) {
            let f = start(c)?;
            self.running.push(Box::new(Slot { f, pick }));
        }
        Ok(())
    }

    /// The names of the functions running, in start order.
    pub fn names(&self) -> Vec<&'static str> {
        self.running.iter().flat_map(|e| e.names()).collect()
    }

    /// True when no function runs.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Whether `new` can be applied, decided for every function before
    /// any changes: the first function that needs a restart says why. A
    /// function added or removed needs a restart.
    pub fn plan_reload(&self, cur: &G, new: &G) -> Reload {
        for k in &self.kinds {
            match ((k.present)(cur), (k.present)(new)) {
                (false, true) => return Reload::NeedsRestart(format!("{} added: restart v6gate to apply", k.tables)),
                (true, false) => return Reload::NeedsRestart(format!("{} removed: restart v6gate to apply", k.tables)),
                _ => {}
            }
        }
        for e in &self.running {
            if let r @ Reload::NeedsRestart(_) = e.plan_reload(cur, new) {
                return r;
            }
        }
        Reload::Applied
    }

    /// Apply `new` to every running function (after
    /// [`Registry::plan_reload`] said `Applied`); every function is
    /// reloaded, the first error returned.
    pub fn reload(&mut self, new: &G) -> Result<(), ReloadError> {
        let mut first = Ok(());
        for e in &mut self.running {
            if let Err(err) = e.reload(new) {
                if first.is_ok() {
                    first = Err(err);
                }
            }
        }
        first
    }

    /// Every declared kind's status key and its status (None: not running).
    pub fn status(&self) -> Vec<(&'static str, Option<serde_json::Value>)> {
        self.kinds
            .iter()
            .map(|k| (k.key, self.running.iter().find(|e| e.status_key() == k.key).map(|e| e.status())))
            .collect()
    }

    /// The metric families of every running function, in start order.
    pub fn metrics(&self) -> Vec<Family> {
        self.running.iter().flat_map(|e| e.metrics()).collect()
    }

    /// Every running function's fast-path adapter, by status key.
    pub fn fast_paths(&self) -> Vec<(&'static str, FastPath)> {
        self.running.iter().map(|e| (e.status_key(), e.fast_path())).collect()
    }

    /// Stop every function, the last started first; the summaries they
    /// return, in that order.
    pub fn stop(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(e) = self.running.pop() {
            out.extend(e.stop());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A host configuration with two optional tables.
    #[derive(Default)]
    struct Host {
        a: Option<u32>,
        b: Option<u32>,
    }

    /// A function that records what happens to it.
    struct Probe {
        key: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        applied: u32,
    }

    impl Function for Probe {
        type Config = u32;
        type Status = u32;
        fn status_key(&self) -> &'static str {
            self.key
        }
        fn names(&self) -> Vec<&'static str> {
            vec![self.key]
        }
        fn plan_reload(&self, cur: &u32, new: &u32) -> Reload {
            // Odd values cannot be applied live.
            if new % 2 == 1 {
                Reload::unless_changed(cur, new, self.key)
            } else {
                Reload::Applied
            }
        }
        fn reload(&mut self, new: &u32) -> Result<(), ReloadError> {
            self.applied = *new;
            crate::lock(&self.log).push(format!("reload {} {new}", self.key));
            Ok(())
        }
        fn status(&self) -> u32 {
            self.applied
        }
        fn metrics(&self) -> Vec<Family> {
            vec![Family::gauge(format!("v6gate_{}_x", self.key), "X.").one(self.applied)]
        }
        fn stop(self) -> Option<String> {
            crate::lock(&self.log).push(format!("stop {}", self.key));
            Some(format!("{} stopped", self.key))
        }
    }

    fn start(r: &mut Registry<Host>, h: &Host, log: &Arc<Mutex<Vec<String>>>) {
        let l = log.clone();
        let ok: Result<(), ()> =
            r.start(h, "a", "[a]", |h: &Host| h.a.as_ref(), |c| Ok(Probe { key: "a", log: l, applied: *c }));
        assert_eq!(ok, Ok(()));
        let l = log.clone();
        let ok: Result<(), ()> =
            r.start(h, "b", "[b]", |h: &Host| h.b.as_ref(), |c| Ok(Probe { key: "b", log: l, applied: *c }));
        assert_eq!(ok, Ok(()));
    }

    #[test]
    fn starts_in_order_reloads_each_stops_in_reverse() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut r = Registry::new();
        let cur = Host { a: Some(2), b: Some(4) };
        start(&mut r, &cur, &log);
        assert_eq!(r.names(), ["a", "b"]);
        let new = Host { a: Some(6), b: Some(4) };
        assert_eq!(r.plan_reload(&cur, &new), Reload::Applied);
        assert_eq!(r.reload(&new), Ok(()));
        assert_eq!(r.status(), [("a", Some(serde_json::json!(6))), ("b", Some(serde_json::json!(4)))]);
        assert_eq!(r.metrics()[0].value(&[]), Some(6.0));
        assert_eq!(r.stop(), ["b stopped", "a stopped"]);
        assert_eq!(*crate::lock(&log), ["reload a 6", "reload b 4", "stop b", "stop a"]);
        assert!(r.is_empty());
    }

    #[test]
    fn a_reload_that_needs_a_restart_is_refused_before_anything_applies() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut r = Registry::new();
        let cur = Host { a: Some(2), b: None };
        start(&mut r, &cur, &log);
        assert_eq!(r.status(), [("a", Some(serde_json::json!(2))), ("b", None)]);
        let odd = Host { a: Some(3), b: None };
        assert_eq!(r.plan_reload(&cur, &odd), Reload::NeedsRestart("a changed: restart v6gate to apply".into()));
        let added = Host { a: Some(2), b: Some(1) };
        assert_eq!(r.plan_reload(&cur, &added), Reload::NeedsRestart("[b] added: restart v6gate to apply".into()));
        let removed = Host::default();
        assert_eq!(r.plan_reload(&cur, &removed), Reload::NeedsRestart("[a] removed: restart v6gate to apply".into()));
        assert!(crate::lock(&log).is_empty());
    }

    #[test]
    fn a_failed_start_adds_nothing() {
        let mut r: Registry<Host> = Registry::new();
        let h = Host { a: Some(1), b: None };
        let e = r.start(&h, "a", "[a]", |h: &Host| h.a.as_ref(), |_| Err::<Probe, _>("port taken"));
        assert_eq!(e, Err("port taken"));
        assert!(r.is_empty());
        assert_eq!(r.status(), [("a", None)]);
    }
}
