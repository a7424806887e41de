#!/usr/bin/env bash
# Where a TRT session's time goes, step by step (docs/trt.md, "Why
# pre-connect did not overlap"). Runs `v6gate bench transition --mech trt`
# under system-wide kernel tracepoints, lines each TRT session up on its
# client's SYN (its socket entering SYN_SENT) and prints the median (and
# quartiles) of each step in µs, then the same for the interleaved native
# IPv4 sessions, how often the held handshake ACK went alone, how often the
# three threads shared one CPU (a run to discard: another job held the
# other CPU), and what the relay's loop did between the client's ACK and
# its accept. Tracing costs 1-2 µs per event: read the steps, not the sums.
# Needs root, perf and python3.
#
#   crates/trt/scripts/trace-session.sh [V6GATE_BIN] [extra bench args...]
#   e.g. crates/trt/scripts/trace-session.sh target/release/v6gate --busy-poll 1ms --trt-preconnect 64
set -euo pipefail
BIN=${1:-${CARGO_TARGET_DIR:-target}/release/v6gate}
shift || true
command -v perf >/dev/null || { echo "trace-session: perf is missing" >&2; exit 1; }
command -v python3 >/dev/null || { echo "trace-session: python3 is missing" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
EV=""
for sc in connect accept4 splice epoll_wait recvmsg recvfrom sendto poll sched_yield close shutdown \
    epoll_ctl getsockname getpeername setsockopt socket; do
    EV="$EV -e syscalls:sys_enter_$sc -e syscalls:sys_exit_$sc"
done
# shellcheck disable=SC2086
perf record -q -a -m 1024 -o "$OUT/perf.data" $EV \
    -e sched:sched_switch -e sched:sched_waking -e net:net_dev_xmit -e net:netif_receive_skb \
    -e sock:inet_sock_set_state \
    -- "$BIN" bench transition --mech trt --seconds 1 --bulk-runs 1 --pings 20 --sessions 1000 \
    --out "$OUT/bench" "$@" >"$OUT/bench.log" 2>&1
grep "session p50" "$OUT/bench.log" || true
perf script -i "$OUT/perf.data" -F comm,tid,cpu,time,event,trace 2>/dev/null >"$OUT/trace.txt"
python3 - "$OUT/trace.txt" <<'PY'
import collections, re, statistics as st, sys
LINE = re.compile(r'^\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$')
ev = []
for l in open(sys.argv[1]):
    m = LINE.match(l)
    if m:
        comm, tid, cpu, t, name, rest = m.groups()
        ev.append((float(t) * 1e6, comm, int(tid), int(cpu), name, rest))
def ret(rest):
    try:
        v = int(rest.strip().split()[0], 16)
    except (ValueError, IndexError):
        return None
    return v - (1 << 64) if v >= 1 << 63 else v
relay = {e[2] for e in ev if e[1] == 'trt-accept'}
STATE = 'sock:inet_sock_set_state'
def starts(src):
    return [i for i, e in enumerate(ev) if e[4] == STATE and src in e[5] and 'dport=5002' in e[5]
            and 'newstate=TCP_SYN_SENT' in e[5]]
def steps(sess, trt):
    out, alone, onecpu, gap = collections.defaultdict(list), 0, 0, collections.Counter()
    for k, i0 in enumerate(sess):
        t0, C = ev[i0][0], ev[i0][2]
        end = sess[k + 1] if k + 1 < len(sess) else len(ev)
        got, spl, cpus, done, q, ack_in = {}, 0, set(), False, False, None
        for t, comm, tid, cpu, name, rest in ev[i0 + 1:min(end, i0 + 4000)]:
            f = lambda s: got.setdefault(s, t - t0)
            r = ret(rest)
            if comm.startswith('v6gate') or tid in relay:
                cpus.add(cpu)
            if tid == C:
                if name == 'syscalls:sys_exit_connect': f("client: connect returns")
                elif name == 'syscalls:sys_exit_sendto': f("client: the byte's sendto returns")
                elif name == 'syscalls:sys_exit_recvfrom' and r == 1:
                    f("client: recvfrom returns the answer"); done = True; break
            elif tid in relay:
                if name == 'syscalls:sys_exit_recvmsg' and (r or 0) > 0: f('relay: reads the SYN')
                elif name == 'syscalls:sys_enter_connect': f('relay: connect to the server enters')
                elif name == 'syscalls:sys_exit_connect': f('relay: connect to the server returns')
                elif name == 'syscalls:sys_exit_accept4' and (r if r is not None else -1) >= 0: f('relay: accept4 returns')
                elif name == 'syscalls:sys_exit_splice' and (r or 0) > 0 and spl < 4:
                    f(['relay: the byte in its pipe', 'relay: the byte sent to the server',
                       'relay: the answer in its pipe', 'relay: the answer sent to the client'][spl]); spl += 1
                elif name == 'syscalls:sys_enter_setsockopt' and 'optname: 0x0000000c' in rest: q = True
                m = re.match(r'sys_enter_(\w+)', name.split(':')[-1])
                if m and ack_in is not None and 'relay: accept4 returns' not in got:
                    gap[m.group(1)] += 1
            elif comm.startswith('v6gate'):
                if name == 'syscalls:sys_exit_accept4' and (r if r is not None else -1) >= 0: f('server: accept4 returns')
                elif name == 'syscalls:sys_exit_recvfrom' and r == 1: f('server: reads the byte')
                elif name == 'syscalls:sys_enter_sendto': f('server: sends the answer')
            if name == STATE and 'oldstate=TCP_SYN_SENT' in rest and 'newstate=TCP_ESTABLISHED' in rest:
                f("client: its socket established")
            if trt and name == STATE and 'AF_INET6' in rest and 'oldstate=TCP_SYN_RECV' in rest and 'newstate=TCP_ESTABLISHED' in rest:
                f("relay: the client's ACK makes its connection"); ack_in = True
        if done:
            for s, v in got.items():
                out[s].append(v)
            alone += q; onecpu += len(cpus) == 1
    return out, alone, onecpu, gap
for title, src, trt in (('TRT', 'family=AF_INET6', True), ('native IPv4', 'saddr=10.0.1.2', False)):
    sess = starts(src)
    out, alone, onecpu, gap = steps(sess, trt)
    n = len(out.get('client: recvfrom returns the answer', []))
    print(f"\n{title}: {n} of {len(sess)} sessions complete; all threads on one CPU in {onecpu}")
    for s, v in sorted(out.items(), key=lambda kv: st.median(kv[1])):
        v.sort()
        print(f"  {s:45s} p25 {v[len(v)//4]:6.0f}  p50 {st.median(v):6.0f}  p75 {v[3*len(v)//4]:6.0f}  (n {len(v)})")
    if trt:
        print(f"  the held ACK sent alone (TCP_QUICKACK) in {alone} sessions")
        print("  relay system calls between the client's ACK and the accept (calls, all sessions):",
              ', '.join(f'{k} {v}' for k, v in gap.most_common(10)))
PY
