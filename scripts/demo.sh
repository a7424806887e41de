#!/usr/bin/env bash
# The v6gate demo: translate the bundled sample packets with the sample
# configuration, show each packet decoded before and after translation,
# then translate the IPv6-to-IPv4 results back to IPv6 (round trip).
# Run through `make demo` (which installs dependencies and builds first).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${V6GATE:-${CARGO_TARGET_DIR:-target}/release/v6gate}
CFG=samples/siit.toml
PKTS=samples/packets.hex
if [ ! -x "$BIN" ]; then
    echo "demo: $BIN not found; run 'make build' first (or set V6GATE=/path/to/v6gate)" >&2
    exit 1
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

rule() { printf '\n=== %s ===\n\n' "$*"; }

rule "Configuration ($CFG)"
grep -v '^#' "$CFG" | sed '/^$/d; s/^/    /'
echo
"$BIN" config check --config "$CFG" | sed 's/^/    config check: /'

rule "Pass 1: the sample packets ($PKTS), decoded before and after translation"
echo "Each input line gives an 'in' line, then one 'out' line per packet emitted"
echo "(forward = translated; icmp-error = error sent back) or a 'drop' line."
echo
"$BIN" translate --config "$CFG" --explain <"$PKTS" >"$WORK/pass1.jsonl" 2>"$WORK/pass1.explain"
cat "$WORK/pass1.explain"

rule "Pass 1 as JSON lines (what a test harness reads on stdout; cut at 160 characters)"
cut -c1-160 "$WORK/pass1.jsonl" | sed 's/$/.../; s/}\.\.\.$/}/'

# IPv6 -> IPv4 -> IPv6: feed the IPv4 packets that pass 1 translated from
# IPv6 back in (hex starting with 4: an IPv4 header).
grep -o '"hex":"4[0-9a-f]*","kind":"forward"' "$WORK/pass1.jsonl" | cut -d'"' -f4 >"$WORK/pass2.hex" || true

rule "Pass 2: the IPv4 packets of pass 1 translated back (IPv6 -> IPv4 -> IPv6)"
if [ ! -s "$WORK/pass2.hex" ]; then
    echo "Pass 1 translated no IPv6 packet to IPv4, so there is nothing to translate back."
else
    echo "Addresses, ports and ICMP identifiers come back as they were in the"
    echo "IPv6 input; the hop limit drops by one per translation."
    echo
    "$BIN" translate --config "$CFG" --explain <"$WORK/pass2.hex" >"$WORK/pass2.jsonl" 2>"$WORK/pass2.explain"
    # Line numbers of pass 2 refer to its own input; show them as packet numbers.
    sed 's/^line /pkt  /' "$WORK/pass2.explain"
fi

rule "Summary"
in1=$(grep -cv '^\s*\(#\|$\)' "$PKTS")
emitted=$(grep -o '"hex"' "$WORK/pass1.jsonl" | wc -l)
drops=$(grep -o '"drop":"[a-z0-9-]*"' "$WORK/pass1.jsonl" | cut -d'"' -f4 | sort | uniq -c | awk '{printf "%s%s=%s", sep, $2, $1; sep=", "}')
echo "pass 1: $in1 packets in, $emitted packets out${drops:+, dropped: $drops}"
echo
echo "Try it yourself:"
echo "    $BIN translate --config $CFG --explain < $PKTS"
echo "    $BIN config example"
