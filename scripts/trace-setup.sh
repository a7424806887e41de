#!/usr/bin/env bash
# Where the time of a NAT64 first packet goes, step by step through the DUT
# (BENCHMARKS.md, "NAT64 first packet"). Runs the session-setup probe of
# `v6gate bench xlat` (--setup-only, one probe rate) under system-wide
# kernel tracepoints, then rebuilds each probe packet's timeline:
#
#   tester tx -> d6 receive -> TUN queued -> worker woken -> running ->
#   poll returns -> read returns -> write entered (v6gate's own work) ->
#   tester receive (IPv4 forwarding to the tester runs inside the write)
#
# and prints the median of each step for the new flows and for the same
# flows sent again (established). Needs root, perf and python3.
#
#   scripts/trace-setup.sh [V6GATE_BIN] [FLOWS] [RATE]
set -euo pipefail
BIN=${1:-${CARGO_TARGET_DIR:-target}/release/v6gate}
FLOWS=${2:-1000}
RATE=${3:-1000}
command -v perf >/dev/null || { echo "trace-setup: perf is missing" >&2; exit 1; }
command -v python3 >/dev/null || { echo "trace-setup: python3 is missing" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

perf record -q -a -o "$OUT/perf.data" \
    -e net:netif_rx -e net:netif_receive_skb -e net:net_dev_start_xmit \
    -e syscalls:sys_enter_read -e syscalls:sys_exit_read \
    -e syscalls:sys_enter_write \
    -e syscalls:sys_exit_poll -e sched:sched_wakeup -e sched:sched_switch \
    -- "$BIN" bench xlat --dut v6gate-nat64 --setup-only --setup-flows "$FLOWS" \
    --setup-probe-rate "$RATE" --max-rate 4000 --max-trials 1 --trial-ms 300 \
    --prefix v6gate-ts --out "$OUT/bench" >"$OUT/bench.log" 2>&1
grep '^| v6gate' "$OUT/bench/results.md" | tail -1
perf script -i "$OUT/perf.data" -F comm,tid,cpu,time,event,trace 2>/dev/null >"$OUT/trace.txt"
rm -f "$OUT/perf.data"

python3 - "$OUT/trace.txt" "$FLOWS" <<'EOF'
import re, statistics, sys
W = 'v6gate-w0'
pat = re.compile(r'^\s*(\S.*?)\s+\d+\s+\[\d+\]\s+([\d.]+):\s+(\S+):\s*(.*)$')
ev = []
for line in open(sys.argv[1], errors='replace'):
    m = pat.match(line)
    if m:
        comm, t, e, rest = m.groups()
        ev.append((float(t), comm, e, rest))
ev.sort(key=lambda x: x[0])
steps = [('tx', 'tester tx'), ('rx6', 'd6 receive'), ('tun', 'TUN queued'), ('wake', 'worker woken'),
         ('run', 'running'), ('poll', 'poll returns'), ('read', 'read returns'),
         ('write', 'write entered'), ('rx4', 'tester receive')]
pkts, cur = [], None
for t, comm, e, rest in ev:
    # The probe frames: 84-byte IPv6 frames, 66 bytes of IPv6 on d6.
    if e == 'net:netif_rx' and 'dev=d6 ' in rest and 'len=66' in rest:
        cur = {'tx': t}
        pkts.append(cur)
        continue
    if cur is None:
        continue
    key = None
    if e == 'net:netif_receive_skb' and 'dev=d6 ' in rest: key = 'rx6'
    elif e == 'net:net_dev_start_xmit' and 'dev=xlat0' in rest: key = 'tun'
    elif e == 'sched:sched_wakeup' and 'comm=' + W in rest: key = 'wake'
    elif e == 'sched:sched_switch' and 'next_comm=' + W in rest: key = 'run'
    elif comm == W and e == 'syscalls:sys_exit_poll': key = 'poll'
    elif comm == W and e == 'syscalls:sys_exit_read' and '0x42' in rest: key = 'read'
    elif comm == W and e == 'syscalls:sys_enter_write': key = 'write'
    elif e == 'net:netif_receive_skb' and 'dev=t4' in rest: key = 'rx4'
    if key and key not in cur:
        cur[key] = t
n = int(sys.argv[2])
print(f'{"step (median, us)":<34} {"first packet":>12} {"established":>12}')
groups = [pkts[:n], pkts[n:2 * n]]
for (a, _), (b, name) in zip(steps, steps[1:]):
    row = []
    for g in groups:
        d = [(p[b] - p[a]) * 1e6 for p in g if a in p and b in p and p[b] >= p[a]]
        row.append(f'{statistics.median(d):12.1f}' if d else f'{"-":>12}')
    print(f'{steps[steps.index((a, _))][1] + " -> " + name:<34} {row[0]} {row[1]}')
row = []
for g in groups:
    d = [(p['rx4'] - p['tx']) * 1e6 for p in g if 'rx4' in p]
    row.append(f'{statistics.median(d):12.1f}' if d else f'{"-":>12}')
print(f'{"tester tx -> tester receive":<34} {row[0]} {row[1]}')
EOF
