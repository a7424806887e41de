#!/usr/bin/env bash
# Run `cargo test --workspace` in one test tier and list what was skipped.
#
#   scripts/test-tier.sh check [CARGO-TEST-ARGS...]   make check: no root, no peers, no namespaces
#                                                     (e.g. `check -p xlat`: that package only)
#   scripts/test-tier.sh full  [CARGO-TEST-ARGS...]   make test (CI): everything; a test that needs
#                                                     root or a peer fails when it is missing
#
# The tier goes to the tests as V6GATE_TEST_TIER (lab::testenv, docs in
# README "Testing"); every test that does not run its body writes one line
# `SKIPPED <test>: <why>` on stderr and into the file V6GATE_TEST_SKIP_LOG,
# which this script reads back after the run: the check tier counts the
# tests it left to `make test`, any tier lists every other skip (a kernel
# that refuses live frames, ...). Exits with cargo's status.
set -uo pipefail
cd "$(dirname "$0")/.."

tier=${1:-}
case "$tier" in
check | full) shift ;;
*)
    echo "usage: $0 check|full [cargo test arguments]" >&2
    exit 2
    ;;
esac

skips=$(mktemp "${TMPDIR:-/tmp}/v6gate-skips.XXXXXX")
trap 'rm -f "$skips"' EXIT

# The whole workspace unless the arguments name packages.
scope=(--workspace)
for a in "$@"; do
    case "$a" in
    -p | -p* | --package | --package=*) scope=() ;;
    esac
done
V6GATE_TEST_TIER=$tier V6GATE_TEST_SKIP_LOG=$skips ${CARGO:-cargo} test "${scope[@]}" --no-fail-fast "$@"
rc=$?

say() { echo "test-tier $tier: $*"; }
# What the tier itself leaves out, and every other skip with its reason.
left=$(grep -c "the check tier (V6GATE_TEST_TIER=check)" "$skips" || true)
others=$(grep -v "the check tier (V6GATE_TEST_TIER=check)" "$skips" | sort || true)
if [ "$tier" = check ]; then
    say "$left tests that need root, network namespaces or peers were skipped (make test runs them as root)"
fi
if [ -n "$others" ]; then
    say "$(wc -l <<<"$others") tests skipped for another reason:"
    echo "$others"
else
    say "no test skipped for another reason"
fi
exit $rc
