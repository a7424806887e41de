//! v6gate's daemon crate: configuration and the offline translator.
