# v6gate — the README's commands.
#   make demo   install dependencies, build, run the sample translation, then the
#               live lab as root: DNS64, NAT64 TCP/UDP, SIIT ping (docs/lab.md)
#   make check  fmt, clippy, the tests that need no root, peers or namespaces
#               (unit, RFC vectors, properties, offline CLI): the edit loop
#   make test   install dependencies, then fmt, clippy, every test (as root,
#               with the peers: what CI runs), fuzz smoke
#   make bench  criterion benchmarks of the packet plane
#   make soak   hostile traffic against every surface (SOAK_SECONDS=600)
CARGO ?= cargo

.PHONY: all deps build demo check test bench clean soak

all: build

deps:
	@scripts/deps.sh

build:
	$(CARGO) build --release --workspace

demo: deps build
	@scripts/demo.sh

# The test tiers (scripts/test-tier.sh, lab::testenv): `check` skips every
# test that needs root, network namespaces or a peer program, also as root;
# `full` runs them all, and a missing root or peer fails the test.
check:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	@CARGO="$(CARGO)" scripts/test-tier.sh check

test: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --quiet
	$(CARGO) deny --log-level error check licenses bans sources
	@CARGO="$(CARGO)" scripts/test-tier.sh full
	@scripts/fuzz-smoke.sh

bench:
	$(CARGO) bench -p xlat

# Soak test of issues #11 and #29 (root, nftables; not part of `make
# test`): mixed hostile traffic from one host with many addresses against
# every surface of one `v6gate run` with every plane on, for SOAK_SECONDS
# (default 600; `SOAK_SECONDS=60 make soak` for a short run), with RSS and
# descriptors checked flat, the legitimate users (SIP call, NAT64, TrGW,
# DS-Lite, DSTM, Teredo, TRT) kept working, nothing reaching loopback or
# the gateway's own addresses and every refusal family counted
# (docs/security.md, "The soak test").
SOAK_SECONDS ?= 600
soak: deps
	SOAK_SECONDS=$(SOAK_SECONDS) $(CARGO) test --test soak -- --ignored --nocapture

clean:
	$(CARGO) clean
	rm -rf fuzz/target

# RFC 8219 / RFC 2544 translation bench in network namespaces (root):
# v6gate (SIIT, NAT64; userspace and the XDP fast path) against TAYGA,
# kernel forwarding and the tester's ceiling; JSON, Markdown and SVG in
# bench-results/xlat/ (docs/bench-xlat.md; `--tester xdp` for the XDP rows).
.PHONY: bench-xlat bench-xlat-quick
bench-xlat: build
	$${CARGO_TARGET_DIR:-target}/release/v6gate bench xlat --out bench-results/xlat

bench-xlat-quick: build
	$${CARGO_TARGET_DIR:-target}/release/v6gate bench xlat --quick --out bench-results/xlat-quick

# Every bench's --quick smoke run, one after the other (root; each under
# 5 minutes on the project's 2-vCPU machine, every figure flagged as the
# device's or the tester's: docs/bench-*.md), into bench-results/NAME-quick/.
.PHONY: bench-quick
bench-quick: build
	for b in xlat trgw sip tunnel transition; do \
		$${CARGO_TARGET_DIR:-target}/release/v6gate bench $$b --quick --out bench-results/$$b-quick || exit 1; \
	done

# Dependency licences, bans and sources as in `make test`, plus the RustSec
# advisories and yanked crates: needs the advisory database from GitHub, so
# it is not part of `make test` (CI reaches only the package registries).
.PHONY: audit
audit: deps
	$(CARGO) deny check

# The Debian package: target/debian/v6gate_VERSION_ARCH.deb (binary,
# systemd unit, /etc/v6gate/v6gate.toml, man pages, completions).
.PHONY: deb
deb:
	@scripts/package.sh
