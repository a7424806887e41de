#!/bin/sh
# Quiet runs of 2026-11-28 (ninth session), main at 7b2689f, nothing else running.
# r1, r2: the ten rows with the defaults (ack-with-data now off);
# r3: the same with the TRT relay holding `cpu-latency = "0us"` during its row;
# rounds: `ipv4,trt` with 1 s transfers, five settings, three rounds.
A=${V6GATE:-/work/main/target/release/v6gate}
O=${OUT:-/tmp/q9final}
ALL=ipv4,nat64,nat64-xdp,natpt-xdp,trt,dslite,dslite-xdp-b4k,lw4o6-xdp-b4k,dstm-xdp-b4k,socat
mkdir -p $O
$A bench transition --mech $ALL --out $O/r1 > $O/r1.log 2>&1
$A bench transition --mech $ALL --out $O/r2 > $O/r2.log 2>&1
$A bench transition --mech $ALL --trt-cpu-latency 0us --out $O/r3 > $O/r3.log 2>&1
for r in 1 2 3; do
  i=0
  for v in "" "--trt-ack-with-data true" "--trt-cpu-latency 0us" "--trt-preconnect 64" "--busy-poll 1ms"; do
    i=$((i+1))
    $A bench transition --mech ipv4,trt --seconds 1 --bulk-runs 1 $v --out $O/rounds/r$r-$i > $O/rounds/r$r-$i.log 2>&1 || mkdir -p $O/rounds
  done
done
echo done > $O/DONE
