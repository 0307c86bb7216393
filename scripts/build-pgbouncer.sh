#!/usr/bin/env bash
# Builds a PgBouncer that tracks prepared statements in transaction mode (1.21 and later) into
# node_modules/.cache/pgbouncer, for the `transaction-prepared` pooler mode's tests and bench:
# Debian 12 ships 1.18, so this takes the source package of Debian 13 (trixie), from Debian's
# own archive, and builds it with its build dependencies from Debian 12 (libevent, c-ares,
# OpenSSL). Nothing is installed system-wide but those -dev packages. A no-op when it is built.
# Needs root (apt-get). Takes about a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="$PWD/node_modules/.cache/pgbouncer"
if [ -x "$prefix/bin/pgbouncer" ]; then "$prefix/bin/pgbouncer" --version | sed -n 1p; exit 0; fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq build-essential pkg-config libevent-dev libssl-dev libc-ares-dev >/dev/null
work="$(mktemp -d)"
chmod 755 "$work" # apt downloads as _apt
trap 'rm -rf "$work"' EXIT
# Only trixie's source index, in a list of its own (the machine's sources are left alone).
echo "deb-src http://deb.debian.org/debian trixie main" > "$work/trixie.list"
apt_opts=(-o "Dir::Etc::sourcelist=$work/trixie.list" -o "Dir::Etc::sourceparts=-" -o "APT::Get::List-Cleanup=0" -o "Dir::State::lists=$work/lists")
mkdir -p "$work/lists/partial"
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only pgbouncer >/dev/null 2>&1)
tarball="$(ls "$work"/pgbouncer_*.orig.tar.gz | head -n 1)"
tar -xzf "$tarball" -C "$work"
source_dir="$(find "$work" -maxdepth 1 -type d -name 'pgbouncer-*' | head -n 1)"
(cd "$source_dir" && ./configure --prefix="$prefix" --without-systemd >/dev/null && make -j"$(nproc)" >/dev/null && make install >/dev/null)
"$prefix/bin/pgbouncer" --version | sed -n 1p
