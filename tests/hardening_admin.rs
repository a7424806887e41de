//! Issue #29 (item 4): the admin API requires exactly one `Host` that
//! names it. Against `v6gate run` in a namespace: a request without
//! `Host` (HTTP/1.1 and 1.0), one with two, and an absolute-form target
//! naming a foreign host are refused and counted; the same requests done
//! right are served.

#[path = "daemon_util/mod.rs"]
mod daemon_util;

use daemon_util::{http_raw, http_status, Lab};

const CONFIG: &str = r#"[siit]
pool6 = "64:ff9b:1::/96"
[tun]
queues = 1
[admin]
listen = "127.0.0.1:9164"
"#;

#[test]
fn the_admin_api_requires_exactly_one_host_that_names_it() {
    let lab = Lab::start(CONFIG);
    let status = |req: &str| http_status(&http_raw(&lab.gw, req.as_bytes()));
    assert_eq!(status("GET /status HTTP/1.1\r\nHost: 127.0.0.1:9164\r\nConnection: close\r\n\r\n"), 200);
    assert_eq!(status("GET /status HTTP/1.1\r\nConnection: close\r\n\r\n"), 400, "HTTP/1.1 without Host");
    assert_eq!(status("GET /status HTTP/1.0\r\n\r\n"), 400, "HTTP/1.0 without Host");
    assert_eq!(
        status("GET /status HTTP/1.1\r\nHost: 127.0.0.1:9164\r\nHost: 127.0.0.1:9164\r\nConnection: close\r\n\r\n"),
        400,
        "two Host headers, even the same"
    );
    assert_eq!(
        status("GET /status HTTP/1.1\r\nHost: localhost:9164\r\nHost: evil.example\r\nConnection: close\r\n\r\n"),
        400
    );
    assert_eq!(
        status("GET http://evil.example/status HTTP/1.1\r\nHost: localhost:9164\r\nConnection: close\r\n\r\n"),
        403,
        "an absolute-form target naming a foreign host"
    );
    assert_eq!(
        status("GET https://127.0.0.1:9164/status HTTP/1.1\r\nHost: 127.0.0.1:9164\r\nConnection: close\r\n\r\n"),
        403,
        "another scheme"
    );
    assert_eq!(
        status("GET http://127.0.0.1:9164/status HTTP/1.1\r\nHost: 127.0.0.1:9164\r\nConnection: close\r\n\r\n"),
        200,
        "an absolute-form target naming this server"
    );
    assert_eq!(lab.metric("v6gate_admin_refused_total{reason=\"host-count\"}"), 4);
    assert_eq!(lab.metric("v6gate_admin_refused_total{reason=\"target\"}"), 2);
    // ctl (HTTP/1.0 with its Host) still works.
    assert!(lab.ctl(&["status"]).is_ok());
}
