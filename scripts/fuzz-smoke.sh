#!/usr/bin/env bash
# Run every cargo-fuzz target under fuzz/ for a short, fixed budget
# (FUZZ_SECONDS, default 20 s each). A crash fails the run. Missing
# nightly toolchain or cargo-fuzz: a warning, and the step is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET=${FUZZ_SECONDS:-20}

say() { echo "fuzz-smoke: $*"; }

if [ ! -f fuzz/Cargo.toml ]; then
    say "no fuzz targets yet (fuzz/Cargo.toml does not exist); nothing to run"
    exit 0
fi
if ! cargo +nightly --version >/dev/null 2>&1; then
    say "WARNING: the nightly toolchain is missing (cargo-fuzz needs it); SKIPPING fuzzing"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    say "WARNING: cargo-fuzz is missing (run 'make deps'); SKIPPING fuzzing"
    exit 0
fi

targets=$(cargo +nightly fuzz list 2>/dev/null || true)
if [ -z "$targets" ]; then
    say "fuzz/ has no targets yet; nothing to run"
    exit 0
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0
for t in $targets; do
    mkdir -p "fuzz/corpus/$t"
    # Committed seed inputs (fuzz/seeds/<target>) start the search from
    # real packets; the growing corpus stays untracked.
    seeds=()
    [ -d "fuzz/seeds/$t" ] && seeds=("fuzz/seeds/$t")
    if cargo +nightly fuzz run "$t" "fuzz/corpus/$t" "${seeds[@]}" -- -max_total_time="$BUDGET" >"$log" 2>&1; then
        say "$t: ok ($(grep -Eo '^#[0-9]+' "$log" | tail -n1 | tr -d '#' || echo '?') runs in ${BUDGET}s)"
    else
        say "$t: FAILED; last lines of its output:"
        tail -n 40 "$log"
        failed=1
    fi
done
exit $failed
