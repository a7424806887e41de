//! Tunnel encapsulations as pure functions (HELPER-OWNED).
