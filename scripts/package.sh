#!/usr/bin/env bash
# Build the Debian package of v6gate: target/debian/v6gate_VERSION_ARCH.deb
#
#   scripts/package.sh [--binary PATH] [--out DIR] [--fast]
#
# Without --binary it builds the release binary (cargo build --release
# --locked). --fast compresses with gzip -1 instead of xz (for tests). The
# package holds:
#   /usr/bin/v6gate                              the binary (debug info stripped)
#   /usr/lib/systemd/system/v6gate.service       packaging/v6gate.service
#   /etc/v6gate/v6gate.toml                      `v6gate config example` (a conffile)
#   /usr/share/man/man1/v6gate*.1.gz             `v6gate manpages`
#   bash, zsh and fish completions               `v6gate completions SHELL`
#   /usr/share/doc/v6gate/                       copyright, README, docs/
# Installing it does not enable or start the service: edit the configuration
# first, then `systemctl enable --now v6gate`.
#
# Built with dpkg-deb (part of dpkg, on every Debian system) rather than
# cargo-deb: nothing to install or compile first, and the man pages,
# completions and conffile come from the binary being packaged.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=""
OUT="$ROOT/target/debian"
COMPRESS=(-Zxz)
while [ $# -gt 0 ]; do
    case "$1" in
    --binary) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --fast) COMPRESS=(-Zgzip -z1); shift ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "package.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

if [ -z "$BIN" ]; then
    (cd "$ROOT" && cargo build --release --locked --quiet --bin v6gate)
    BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/v6gate"
fi
[ -x "$BIN" ] || { echo "package.sh: $BIN is not an executable" >&2; exit 1; }

VERSION=$("$BIN" --version | awk '{print $2}')
ARCH=$(dpkg --print-architecture)
NAME="v6gate_${VERSION}_${ARCH}"
mkdir -p "$OUT"
STAGE=$(mktemp -d "$OUT/.stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
P="$STAGE/$NAME"

install -D -m 0755 "$BIN" "$P/usr/bin/v6gate"
if command -v strip >/dev/null 2>&1; then
    strip --strip-debug "$P/usr/bin/v6gate"
fi
install -D -m 0644 "$ROOT/packaging/v6gate.service" "$P/usr/lib/systemd/system/v6gate.service"
install -d -m 0755 "$P/etc/v6gate"
"$BIN" config example >"$P/etc/v6gate/v6gate.toml"
chmod 0644 "$P/etc/v6gate/v6gate.toml"

MAN="$P/usr/share/man/man1"
"$BIN" manpages --dir "$MAN"
gzip -9n "$MAN"/*.1
chmod 0644 "$MAN"/*.1.gz
install -d -m 0755 "$P/usr/share/bash-completion/completions" "$P/usr/share/zsh/vendor-completions" \
    "$P/usr/share/fish/vendor_completions.d"
"$BIN" completions bash >"$P/usr/share/bash-completion/completions/v6gate"
"$BIN" completions zsh >"$P/usr/share/zsh/vendor-completions/_v6gate"
"$BIN" completions fish >"$P/usr/share/fish/vendor_completions.d/v6gate.fish"

DOC="$P/usr/share/doc/v6gate"
install -d -m 0755 "$DOC"
install -m 0644 "$ROOT/README.md" "$DOC/README.md"
for f in daemon nat64 dns64 trgw migrating architecture security; do
    [ -f "$ROOT/docs/$f.md" ] && install -m 0644 "$ROOT/docs/$f.md" "$DOC/$f.md"
done
cat >"$DOC/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: v6gate

Files: *
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF
find "$P" -type d -exec chmod 0755 {} +

# Dependencies: the C library version the binary's symbols need.
DEPENDS="libc6, libgcc-s1"
if command -v objdump >/dev/null 2>&1; then
    GLIBC=$(objdump -T "$P/usr/bin/v6gate" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
    [ -n "$GLIBC" ] && DEPENDS="libc6 (>= $GLIBC), libgcc-s1"
fi

install -d -m 0755 "$P/DEBIAN"
echo "/etc/v6gate/v6gate.toml" >"$P/DEBIAN/conffiles"
cat >"$P/DEBIAN/control" <<EOF
Package: v6gate
Version: $VERSION
Architecture: $ARCH
Maintainer: v6gate developers <v6gate@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$P" | cut -f1)
Depends: $DEPENDS
Suggests: kamailio
Section: net
Priority: optional
Description: IPv4/IPv6 transition gateway (SIIT, NAT64, DNS64, IMS TrGW)
 v6gate translates between IPv4 and IPv6: stateless SIIT (RFC 7915) with
 RFC 6052, IVI and EAMT address mapping, stateful NAT64 (RFC 6146) and
 NAT-PT pool mode, DNS64 (RFC 6147), and relays media as an IMS TrGW driven
 by rtpengine's ng protocol or rtpproxy's. One daemon on a multiqueue TUN
 device, with a Prometheus admin API, reload on SIGHUP and systemd
 readiness notification.
EOF

# Maintainer scripts: tell a running systemd about the unit; stop the
# service before removal. They honour DPKG_ROOT (dpkg --root installs).
cat >"$P/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
    if systemctl is-active --quiet v6gate.service; then
        systemctl try-restart v6gate.service || true
    fi
fi
exit 0
EOF
cat >"$P/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
    systemctl stop v6gate.service >/dev/null 2>&1 || true
fi
exit 0
EOF
cat >"$P/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
fi
exit 0
EOF
chmod 0755 "$P/DEBIAN/postinst" "$P/DEBIAN/prerm" "$P/DEBIAN/postrm"
(cd "$P" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) >"$P/DEBIAN/md5sums"

DEB="$OUT/$NAME.deb"
dpkg-deb --root-owner-group "${COMPRESS[@]}" --build "$P" "$DEB" >/dev/null
echo "$DEB"
