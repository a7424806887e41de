#!/bin/sh
# Quiet runs of 2026-11-27 (eighth). A = main after merges; B = 5f112f3 (before).
A=/work/main/target/release/v6gate
B=/work/wt/v6gate-before
O=/tmp/q8
mkdir -p $O
$A bench transition --mech ipv4,nat64,nat64-xdp,natpt-xdp,trt,dslite,dslite-xdp-b4k,lw4o6-xdp-b4k,dstm-xdp-b4k,socat --out $O/r1 > $O/r1.log 2>&1
for r in 1 2 3; do
  i=0
  for v in "" "--trt-preconnect 64" "--busy-poll 1ms --trt-preconnect 64"; do
    i=$((i+1))
    $B bench transition --mech ipv4,trt --seconds 1 --bulk-runs 1 $v --out $O/trt-before-$r-$i > $O/trt-before-$r-$i.log 2>&1
  done
  i=0
  for v in "" "--trt-close-delay 1ms" "--trt-preconnect 64" "--busy-poll 1ms --trt-preconnect 64" "--trt-close-delay 1ms --trt-preconnect 64"; do
    i=$((i+1))
    $A bench transition --mech ipv4,trt --seconds 1 --bulk-runs 1 $v --out $O/trt-after-$r-$i > $O/trt-after-$r-$i.log 2>&1
  done
done
$A bench transition --mech ipv4,nat64-xdp,natpt-xdp,trt,socat --out $O/r2 > $O/r2.log 2>&1
echo done > $O/DONE
