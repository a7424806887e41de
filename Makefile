# v6gate — the README's commands.
#   make demo   install dependencies, build, run the sample translation, then the
#               live lab as root: DNS64, NAT64 TCP/UDP, SIIT ping (docs/lab.md)
#   make test   install dependencies, then fmt, clippy, tests, fuzz smoke
#   make bench  criterion benchmarks of the packet plane
#   make soak   hostile traffic against every listener (SOAK_SECONDS=600)
CARGO ?= cargo

.PHONY: all deps build demo test bench clean soak

all: build

deps:
	@scripts/deps.sh

build:
	$(CARGO) build --release --workspace

demo: deps build
	@scripts/demo.sh

test: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --quiet
	$(CARGO) deny --log-level error check licenses bans sources
	$(CARGO) test --workspace --no-fail-fast
	@scripts/fuzz-smoke.sh

bench:
	$(CARGO) bench -p xlat

# Soak test of issue #11 (root; not part of `make test`): mixed hostile
# traffic against every listener of `v6gate run` for SOAK_SECONDS (default
# 600) with RSS and descriptors checked flat and the NAT64 session and TrGW
# call kept (docs/security.md).
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
