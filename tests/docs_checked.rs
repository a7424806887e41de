//! Docs that are checked against the code (issue #30 item 5).
//!
//! - `crate_graph_is_current` (no root): the workspace crate graph in
//!   docs/architecture.md, between its `crate-graph` marker comments, is
//!   what `cargo metadata --format-version 1 --no-deps` says now.
//! - `metric_list_matches_the_daemon` (root, namespaces): every metric
//!   family `v6gate run` exports, with every plane configured, is listed in
//!   docs/metrics.md between its `metric-families` markers, and every
//!   family listed there is exported.
//!
//! A stale section fails with the difference. `V6GATE_BLESS=1 cargo test
//! --test docs_checked crate_graph` rewrites the crate graph in place (it
//! is generated); the metric list is prose and is edited by hand.

#[path = "daemon_util/mod.rs"]
mod daemon_util;
#[path = "hardening_util/mod.rs"]
mod hardening_util;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text between the line holding `<!-- NAME:begin` and the line
/// holding `<!-- NAME:end -->` of `doc`, both marker lines excluded, and
/// the byte range it spans.
fn marked(doc: &str, name: &str) -> (String, std::ops::Range<usize>) {
    let begin = format!("<!-- {name}:begin");
    let end = format!("<!-- {name}:end -->");
    let b = doc.find(&begin).unwrap_or_else(|| panic!("no `{begin}` marker"));
    let start = b + doc[b..].find('\n').unwrap_or_else(|| panic!("`{begin}` marker ends the file")) + 1;
    let stop = start + doc[start..].find(&end).unwrap_or_else(|| panic!("no `{end}` marker after `{begin}`"));
    (doc[start..stop].to_string(), start..stop)
}

/// Lines only in `doc` (`-`) and only in `want` (`+`), in order.
fn line_diff(doc: &str, want: &str) -> String {
    let d: BTreeSet<&str> = doc.lines().collect();
    let w: BTreeSet<&str> = want.lines().collect();
    let mut out = String::new();
    for l in doc.lines().filter(|l| !w.contains(l)) {
        out.push_str(&format!("- {l}\n"));
    }
    for l in want.lines().filter(|l| !d.contains(l)) {
        out.push_str(&format!("+ {l}\n"));
    }
    out
}

// ---------------------------------------------------------------------------
// The crate graph

/// One workspace crate: its description and the workspace crates it
/// depends on, normal and dev dependencies apart.
struct Crate {
    description: String,
    normal: BTreeSet<String>,
    dev: BTreeSet<String>,
}

fn workspace_crates() -> BTreeMap<String, Crate> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("{cargo} metadata: {e}"));
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = m["packages"].as_array().expect("cargo metadata has packages");
    let names: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut crates = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().expect("a package has a name");
        let mut c = Crate {
            description: p["description"].as_str().unwrap_or("").to_string(),
            normal: BTreeSet::new(),
            dev: BTreeSet::new(),
        };
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let Some(dep) = d["name"].as_str().filter(|n| names.contains(n)) else { continue };
            match d["kind"].as_str() {
                None => c.normal.insert(dep.to_string()),
                Some("dev") => c.dev.insert(dep.to_string()),
                // Build dependencies: none in the workspace today; shown with the normal ones.
                Some(_) => c.normal.insert(format!("{dep} (build)")),
            };
        }
        crates.insert(name.to_string(), c);
    }
    crates
}

/// The generated section: a Mermaid graph of the normal dependencies and a
/// table with each crate's description and its dev-dependencies.
fn crate_graph() -> String {
    let crates = workspace_crates();
    let tick = |s: &BTreeSet<String>| s.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", ");
    let edges: usize = crates.values().map(|c| c.normal.len()).sum();
    let mut s = String::from("```mermaid\ngraph TD\n");
    for (name, c) in &crates {
        for d in &c.normal {
            s.push_str(&format!("    {name} --> {d}\n"));
        }
    }
    s.push_str("```\n\n");
    s.push_str(&format!(
        "{} workspace crates, {edges} edges: an arrow is a normal dependency (`[dependencies]`); \
         dev-dependencies, which only tests and benches use, are in the last column and not drawn.\n\n",
        crates.len()
    ));
    s.push_str(
        "| crate | what it is (its `Cargo.toml` description) | depends on | dev-dependencies |\n|---|---|---|---|\n",
    );
    for (name, c) in &crates {
        s.push_str(&format!(
            "| `{name}` | {} | {} | {} |\n",
            c.description.replace('|', "\\|"),
            tick(&c.normal),
            tick(&c.dev)
        ));
    }
    s
}

#[test]
fn crate_graph_is_current() {
    let path = repo().join("docs/architecture.md");
    let doc = std::fs::read_to_string(&path).expect("docs/architecture.md");
    let (have, range) = marked(&doc, "crate-graph");
    let want = crate_graph();
    if have == want {
        return;
    }
    if std::env::var_os("V6GATE_BLESS").is_some_and(|v| v == "1") {
        let mut new = doc.clone();
        new.replace_range(range, &want);
        std::fs::write(&path, new).expect("write docs/architecture.md");
        return;
    }
    panic!(
        "the crate graph in docs/architecture.md is stale (`V6GATE_BLESS=1 cargo test --test docs_checked \
         crate_graph` rewrites it); lines to remove (-) and to add (+):\n{}",
        line_diff(&have, &want)
    );
}

#[test]
fn the_marker_helpers_find_and_diff() {
    let doc = "a\n<!-- x:begin note -->\none\ntwo\n<!-- x:end -->\nb\n";
    let (inner, r) = marked(doc, "x");
    assert_eq!(inner, "one\ntwo\n");
    assert_eq!(&doc[r], "one\ntwo\n");
    assert_eq!(line_diff("one\ntwo\n", "one\nthree\n"), "- two\n+ three\n");
}

// ---------------------------------------------------------------------------
// The metric list

/// A documented or exported family: its sample name (counters with
/// `_total`) and its type.
type Family = (String, &'static str);

fn kind(word: &str) -> Option<&'static str> {
    match word {
        "counter" => Some("counter"),
        "gauge" => Some("gauge"),
        _ => None,
    }
}

/// Every family of an OpenMetrics document, from its `# TYPE` lines, which
/// the daemon writes for every family it has, with samples or not.
fn exported(text: &str) -> BTreeSet<Family> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, ty) = l.split_once(' ').unwrap_or_else(|| panic!("bad TYPE line {l:?}"));
            let ty = kind(ty.trim()).unwrap_or_else(|| panic!("unexpected metric type in {l:?}"));
            let name = if ty == "counter" { format!("{name}_total") } else { name.to_string() };
            (name, ty)
        })
        .collect()
}

/// Every family docs/metrics.md lists: in each table row of the marked
/// section, the names in backquotes of the first cell, with the type of the
/// second. A name with `<...>` in it is a pattern (`v6gate_dns64_<counter>_total`).
fn documented(doc: &str) -> BTreeSet<Family> {
    let (list, _) = marked(doc, "metric-families");
    let mut out = BTreeSet::new();
    for row in list.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let ty = cells
            .get(2)
            .and_then(|c| c.split_whitespace().next())
            .and_then(kind)
            .unwrap_or_else(|| panic!("docs/metrics.md: no type (counter or gauge) in the second cell of {row:?}"));
        for name in cells[1].split('`').skip(1).step_by(2) {
            assert_eq!(
                name.ends_with("_total"),
                ty == "counter",
                "docs/metrics.md: {name} is a {ty}: counters are listed with `_total`, gauges without"
            );
            out.insert((name.to_string(), ty));
        }
    }
    assert!(!out.is_empty(), "docs/metrics.md lists no family");
    out
}

/// Whether `name` matches the documented `pattern`, where `<...>` stands
/// for one or more of `[a-z0-9_]`.
fn matches(pattern: &str, name: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('<') else { return pattern == name };
    let Some((_, tail)) = rest.split_once('>') else { return pattern == name };
    name.len() > head.len() + tail.len()
        && name.starts_with(head)
        && name.ends_with(tail)
        && name[head.len()..name.len() - tail.len()]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Exported families the docs do not list, and listed ones (or patterns)
/// nothing exported. An exported name listed by name is not matched
/// against the patterns.
fn compare(docs: &BTreeSet<Family>, got: &BTreeSet<Family>) -> (Vec<Family>, Vec<Family>) {
    let (patterns, names): (BTreeSet<&Family>, BTreeSet<&Family>) = docs.iter().partition(|(n, _)| n.contains('<'));
    let rest: Vec<&Family> = got.iter().filter(|f| !names.contains(f)).collect();
    let undocumented = rest
        .iter()
        .filter(|(n, t)| !patterns.iter().any(|(p, pt)| pt == t && matches(p, n)))
        .map(|f| (*f).clone())
        .collect();
    let unexported = docs
        .iter()
        .filter(|(n, t)| match names.contains(&(n.clone(), *t)) {
            true => !got.contains(&(n.clone(), *t)),
            false => !rest.iter().any(|(g, gt)| gt == t && matches(n, g)),
        })
        .cloned()
        .collect();
    (undocumented, unexported)
}

#[test]
fn metric_docs_parse_and_compare() {
    let doc = "x\n<!-- metric-families:begin -->\n| name | type | labels |\n|---|---|---|\n\
               | `a_total`, `b_total` | counter | `reason` |\n| `c` | gauge (1) | |\n\
               | `d_<counter>_total` | counter | one name each |\n<!-- metric-families:end -->\n";
    let docs = documented(doc);
    assert_eq!(docs.len(), 4);
    assert!(docs.contains(&("c".to_string(), "gauge")));
    let got = exported(
        "# HELP a x\n# TYPE a counter\n# TYPE b counter\n# TYPE c gauge\n# TYPE d_hits counter\n# TYPE e gauge\n# EOF\n",
    );
    let (undocumented, unexported) = compare(&docs, &got);
    assert_eq!(undocumented, vec![("e".to_string(), "gauge")]);
    assert!(unexported.is_empty(), "{unexported:?}");
    // A pattern nothing matches, and a gauge listed as one that is a counter.
    let got = exported("# TYPE a counter\n# TYPE b counter\n# TYPE c counter\n");
    let (undocumented, unexported) = compare(&docs, &got);
    assert_eq!(undocumented, vec![("c_total".to_string(), "counter")]);
    assert_eq!(unexported, vec![("c".to_string(), "gauge"), ("d_<counter>_total".to_string(), "counter")]);
    assert!(matches("d_<x>_total", "d_hits_total") && !matches("d_<x>_total", "d__total") && !matches("d_<x>", "e_a"));
}

/// Every plane `v6gate run` has: hardening_util's gateway (SIIT, NAT64,
/// the TrGW, here with shared sockets), the XDP fast path mirroring NAT64
/// sessions and TrGW legs, DNS64, the ALG, a 6to4 relay, a DS-Lite AFTR
/// and the transport relay.
fn every_plane(dir: &Path) -> String {
    let others = r#"
[xdp]
interfaces = ["g6", "g4"]
mode = "generic"
[dns64]
listen = ["[2001:db8:1::1]:53"]
upstream = ["198.51.100.2:5353"]
[alg]
listen-v6 = "[2001:db8:1::1]:5060"
listen-v4 = "198.51.100.1:5060"
media-v6-interface = "v6"
media-v4-interface = "v4"
[sixtofour]
mode = "relay"
address = "198.51.100.1"
tun = "v6d-6to4"
[dslite]
aftr-address = "2001:db8:ffff::1"
b4-prefixes = ["2001:db8:5::/48"]
pool4 = ["203.0.113.9/32"]
tun = "v6d-aftr"
[trt]
prefix = "64:ff9b:3::/96"
"#;
    format!("{}{others}", hardening_util::config(dir, "", "sockets = \"shared\""))
}

#[test]
fn metric_list_matches_the_daemon() {
    lab::need_root!();
    let docs = documented(&std::fs::read_to_string(repo().join("docs/metrics.md")).expect("docs/metrics.md"));
    let sock = tempfile::tempdir().unwrap();
    let lab = daemon_util::Lab::start(&every_plane(sock.path()));
    let status = lab.status();
    let functions: BTreeSet<&str> =
        status["functions"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
    let text = lab.ctl(&["metrics"]).unwrap_or_else(|e| panic!("ctl metrics: {e}\n{}", lab.log()));
    let got = exported(&text);
    let (undocumented, unexported) = compare(&docs, &got);
    assert!(
        undocumented.is_empty() && unexported.is_empty(),
        "docs/metrics.md and `v6gate run`'s /metrics differ (functions running: {functions:?}).\n\
         Exported, not in docs/metrics.md: {undocumented:?}\nIn docs/metrics.md, exported by no plane: {unexported:?}"
    );
}
