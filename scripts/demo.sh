#!/usr/bin/env bash
# The v6gate demo (`make demo`, which installs dependencies and builds first).
#
#  1. Offline: translate a few bundled sample packets (samples/).
#  2. Live: `v6gate lab run` builds the papers' testbed in network namespaces
#     -- an IPv6-only client h6, the gateway gw running v6gate, an IPv4-only
#     server h4 -- then, from the IPv6-only client: resolve the IPv4-only
#     server's name through DNS64, fetch from it over TCP and UDP through
#     NAT64, ping both ways through SIIT, and show the counters that moved.
#     `v6gate lab down` removes everything again (also when a step fails).
#
# The live part needs root (network namespaces); without root it is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${V6GATE:-${CARGO_TARGET_DIR:-target}/release/v6gate}
CFG=samples/siit.toml
PKTS=samples/packets.hex
if [ ! -x "$BIN" ]; then
    echo "demo: $BIN not found; run 'make build' first (or set V6GATE=/path/to/v6gate)" >&2
    exit 1
fi
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")

rule() { printf '\n=== %s ===\n\n' "$*"; }
step() { printf '\n$ %s\n' "$*"; }
indent() { sed 's/^/    /'; }

# --- 1. Offline translation ------------------------------------------------
rule "1. Offline: the sample packets ($PKTS) through the SIIT translator ($CFG)"
echo "Each input packet, then what the translator emits (forward / icmp-error) or why it drops it:"
echo
"$BIN" translate --config "$CFG" --explain <"$PKTS" 2>&1 >/dev/null | head -n 12 | indent
echo "    ... (all of them: $BIN translate --config $CFG --explain < $PKTS)"

# --- 2. The live lab -----------------------------------------------------------
if [ "$(id -u)" -ne 0 ]; then
    rule "2. Live lab: skipped (needs root for network namespaces; run 'sudo make demo')"
    exit 0
fi

LAB=(/usr/bin/env "$BIN" lab)
cleanup() { "${LAB[@]}" down >/dev/null 2>&1 || true; }
trap cleanup EXIT

rule "2. Live lab: IPv6-only client -- v6gate -- IPv4-only server, in network namespaces"
step "v6gate lab run"
"${LAB[@]}" run | indent
# shellcheck disable=SC1091
. /run/v6gate-lab/lab.env

ctl() { "${LAB[@]}" exec gw -- "$BIN" ctl --admin "$LAB_ADMIN" "$@"; }
metrics() {
    if [ "$LAB_GATEWAY" = v6gate ]; then ctl metrics 2>/dev/null | grep -v '^#' | grep -v uptime_seconds || true; fi
}
metrics >/tmp/v6gate-demo-before.txt

rule "DNS64: the IPv6-only client asks for the IPv4-only server's AAAA record"
if [ "$LAB_HAS_DNS64" = yes ]; then
    echo "The server $LAB_NAME has only an A record ($LAB_H4); the gateway's DNS64"
    echo "synthesises an AAAA record inside the NAT64 prefix."
    step "v6gate lab client dns $LAB_NAME --type A --node h4 --server $LAB_H4     # the zone itself"
    "${LAB[@]}" client dns "$LAB_NAME" --type A --node h4 --server "$LAB_H4" | indent
    step "v6gate lab client dns $LAB_NAME --type AAAA --node h6 --server [$LAB_DNS64]"
    "${LAB[@]}" client dns "$LAB_NAME" --type AAAA --node h6 --server "[$LAB_DNS64]" | tee /tmp/v6gate-demo-aaaa.txt | indent
    TARGET=$(awk '$2 == "AAAA" {print $3; exit}' /tmp/v6gate-demo-aaaa.txt)
    TARGET=${TARGET:-$LAB_H4_NAT64}
else
    echo "(this gateway ($LAB_GATEWAY) has no DNS64; using the NAT64 address directly)"
    TARGET=$LAB_H4_NAT64
fi

rule "NAT64: TCP and UDP from the IPv6-only client to $TARGET"
case "$LAB_HAS_NAT64" in
stateful) echo "The server sees the client's address from the NAT64 pool (and a mapped port)." ;;
stateless) echo "(TAYGA stands in: stateless NAT64, the client maps 1:1 to $LAB_H6_SIIT4)" ;;
*)
    echo "(this v6gate has no stateful NAT64 yet; SIIT carries TCP and UDP to $LAB_H4_SIIT6 instead)"
    TARGET=$LAB_H4_SIIT6
    ;;
esac
step "v6gate lab client tcp $TARGET       # HTTP GET, port 80"
"${LAB[@]}" client tcp "$TARGET" | indent
step "v6gate lab client udp $TARGET       # UDP echo, port 7"
"${LAB[@]}" client udp "$TARGET" --msg "hello from the IPv6-only client" | indent

rule "SIIT: ping both ways"
step "v6gate lab exec h6 -- ping -c 3 $LAB_H4_SIIT6      # IPv6-only -> IPv4-only"
"${LAB[@]}" exec h6 -- ping -n -c 3 -i 0.2 -W 2 "$LAB_H4_SIIT6" | indent
step "v6gate lab exec h4 -- ping -c 3 $LAB_H6_SIIT4         # IPv4-only -> IPv6-only"
"${LAB[@]}" exec h4 -- ping -n -c 3 -i 0.2 -W 2 "$LAB_H6_SIIT4" | indent

if [ "$LAB_GATEWAY" = v6gate ]; then
    rule "The counters that moved (v6gate ctl metrics, before -> after)"
    metrics >/tmp/v6gate-demo-after.txt
    awk 'NR == FNR { before[$1] = $2; next }
         ($1 in before) && before[$1] != $2 { printf "    %-70s %8s -> %s\n", $1, before[$1], $2; next }
         !($1 in before) && $2 != 0 { printf "    %-70s %8s -> %s\n", $1, "-", $2 }' \
        /tmp/v6gate-demo-before.txt /tmp/v6gate-demo-after.txt
    if [ "$LAB_HAS_NAT64" = stateful ]; then
        step "v6gate ctl sessions     # the NAT64 sessions the client opened"
        ctl sessions | head -n 40 | indent
    fi
fi
rm -f /tmp/v6gate-demo-before.txt /tmp/v6gate-demo-after.txt /tmp/v6gate-demo-aaaa.txt

rule "Done"
step "v6gate lab down"
"${LAB[@]}" down | indent
trap - EXIT
echo
echo "Build the lab yourself: $BIN lab run; $BIN lab status; $BIN lab down"
echo "Measure: $BIN bench xlat --quick   (docs/bench-xlat.md)"
