#!/usr/bin/env bash
# Install what v6gate's build, demo and tests need, if it is missing.
# Idempotent and quiet: prints nothing but what it installs or cannot.
# Works without a TTY; as root it installs directly, otherwise through
# `sudo -n` when that works, else it prints what to install and goes on.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

log() { echo "deps: $*" >&2; }

# How to run a command as root: "" (we are root), "sudo -n", or "" with
# CAN_ROOT=0 when neither is possible.
CAN_ROOT=1
AS_ROOT=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        AS_ROOT=(sudo -n)
    else
        CAN_ROOT=0
    fi
fi

# --- Debian packages -------------------------------------------------------
# clang + libbpf-dev + linux-libc-dev (+ pkg-config): the XDP fast path (bpf/*.bpf.c, built by crates/xdp/build.rs).
# sip-tester (SIPp): SIP load for the IMS-ALG and TrGW interop tests.
# iproute2, iputils-ping: `ip netns` and ping for the lab and the namespace tests.
# The peers v6gate is tested and benchmarked against: tayga (SIIT/NAT64),
# rtpengine-daemon (media relay), kamailio (+ its rtpengine/rtpproxy modules).
# (tshark is optional and not installed here.)
# miredo, miredo-server: the Teredo peers of the tunnel interop tests and
# bench; nftables: the NATs of those tests and the TRT relay's tproxy rule
# (v6gate trt). Their services are not started (see below): the tests run
# them with their own configuration files. curl: the TRT HTTP download
# test; socat: the plain user-level relay of `v6gate bench transition`.
APT_PKGS=(clang libbpf-dev linux-libc-dev pkg-config sip-tester iproute2 iputils-ping tayga rtpengine-daemon kamailio miredo miredo-server nftables curl socat)

missing=()
for p in "${APT_PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        log "no apt-get here; please install: ${missing[*]}"
    elif [ "$CAN_ROOT" -eq 0 ]; then
        log "not root and no password-less sudo; please install: ${missing[*]}"
    else
        log "installing ${missing[*]}"
        # Packages such as miredo start a service on install (which would
        # contact a public Teredo server): forbid service starts for the
        # duration when the machine does not already (a policy-rc.d that
        # exits 101), and remove that policy again afterwards.
        own_policy=0
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            printf '#!/bin/sh\nexit 101\n' | "${AS_ROOT[@]}" tee /usr/sbin/policy-rc.d >/dev/null &&
                "${AS_ROOT[@]}" chmod 755 /usr/sbin/policy-rc.d && own_policy=1
        fi
        if ! { "${AS_ROOT[@]}" apt-get update -qq >/dev/null &&
            "${AS_ROOT[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
            log "WARNING: apt-get could not install ${missing[*]}; continuing without"
        fi
        if [ "$own_policy" = 1 ]; then "${AS_ROOT[@]}" rm -f /usr/sbin/policy-rc.d; fi
    fi
fi

# --- Rust toolchain components --------------------------------------------
if command -v rustup >/dev/null 2>&1; then
    installed=$(rustup component list --installed --toolchain stable 2>/dev/null || true)
    comps=()
    for c in rustfmt clippy; do
        grep -q "^$c" <<<"$installed" || comps+=("$c")
    done
    if [ ${#comps[@]} -gt 0 ]; then
        log "installing rustup components ${comps[*]} (stable)"
        rustup component add --toolchain stable "${comps[@]}" >/dev/null 2>&1 ||
            log "WARNING: rustup could not install ${comps[*]}"
    fi
else
    log "no rustup: make sure rustfmt and clippy are installed"
fi

# --- cargo tools, pinned (cargo install --locked: the same build everywhere)
# cargo-fuzz: the fuzz targets under fuzz/, run by scripts/fuzz-smoke.sh.
# cargo-deny: dependency licences, bans, sources (`make test`; deny.toml).
# Debian packages neither; each is compiled once (a few minutes on two
# cores), and skipped afterwards when that version is on PATH.
CARGO_FUZZ_VERSION=0.13.2
CARGO_DENY_VERSION=0.20.2
cargo_tool() { # cargo_tool SUBCOMMAND CRATE VERSION WHAT-FAILS-WITHOUT
    local have
    have=$(cargo "$1" --version 2>/dev/null || true)
    [ "$have" = "$2 $3" ] && return 0
    log "installing $2 $3 (cargo install --locked, takes a few minutes)"
    cargo install "$2" --version "=$3" --locked --quiet --force >/dev/null 2>&1 ||
        log "WARNING: $2 could not be installed; $4"
}
if ! command -v cargo >/dev/null 2>&1; then
    log "no cargo on PATH: install Rust (rustup) first"
else
    cargo_tool fuzz cargo-fuzz "$CARGO_FUZZ_VERSION" "fuzzing will be skipped"
    cargo_tool deny cargo-deny "$CARGO_DENY_VERSION" "make test will fail at its check"
fi
exit 0
