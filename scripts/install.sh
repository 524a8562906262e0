#!/usr/bin/env bash
# Installs nnaccel on this host: builds the release binaries and installs nnaccel-hald (the HAL
# service), nnaccelctl, nnaccel-sim (the simulated device), the systemd units, the udev rule
# and an example /etc/nnaccel/hald.toml (an existing one is kept). Then says how to start them.
#
#   scripts/install.sh [options]
#
#   --prefix DIR      where the binaries go (default /usr/local): DIR/libexec/nnaccel/nnaccel-hald,
#                     DIR/bin/nnaccelctl, DIR/sbin/nnaccel-sim, DIR/share/doc/nnaccel/
#   --unitdir DIR     systemd units (default /etc/systemd/system)
#   --udevdir DIR     udev rules (default /etc/udev/rules.d)
#   --destdir DIR     stage everything under DIR (packaging, tests): no root needed, nothing
#                     is reloaded, no group is created
#   --target-dir DIR  cargo's target directory (default $CARGO_TARGET_DIR, else ./target)
#   --no-build        install binaries already built in TARGET/release (e.g. build as a user,
#                     then `sudo scripts/install.sh --no-build`)
#   --dry-run         print what would be done, change nothing
#   --uninstall       remove what an install put there (an edited hald.toml stays)
#   -h, --help        this text
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)

prefix=/usr/local
unitdir=/etc/systemd/system
udevdir=/etc/udev/rules.d
confdir=/etc/nnaccel
destdir=
target_dir=${CARGO_TARGET_DIR:-$repo/target}
build=1
dry_run=0
uninstall=0

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "install.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift ;;
        --prefix=*) prefix=${1#*=} ;;
        --unitdir) [ $# -ge 2 ] || die "--unitdir needs a directory"; unitdir=$2; shift ;;
        --unitdir=*) unitdir=${1#*=} ;;
        --udevdir) [ $# -ge 2 ] || die "--udevdir needs a directory"; udevdir=$2; shift ;;
        --udevdir=*) udevdir=${1#*=} ;;
        --destdir) [ $# -ge 2 ] || die "--destdir needs a directory"; destdir=$2; shift ;;
        --destdir=*) destdir=${1#*=} ;;
        --target-dir) [ $# -ge 2 ] || die "--target-dir needs a directory"; target_dir=$2; shift ;;
        --target-dir=*) target_dir=${1#*=} ;;
        --no-build) build=0 ;;
        --dry-run|-n) dry_run=1 ;;
        --uninstall) uninstall=1 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

for d in "$prefix" "$unitdir" "$udevdir"; do
    case "$d" in
        /*) ;;
        *) die "$d: must be an absolute path" ;;
    esac
    case "$d" in
        *'|'*|*' '*) die "$d: must not contain '|' or spaces" ;;
    esac
done
case "$target_dir" in
    /*) ;;
    *) target_dir=$PWD/$target_dir ;;
esac
# "/usr/local/" → "/usr/local"; "/" → "" (paths below are "$prefix/...").
prefix=${prefix%/}
if [ -n "$destdir" ]; then
    case "$destdir" in
        /*) ;;
        *) destdir=$PWD/$destdir ;;
    esac
    destdir=${destdir%/}
fi

# Where things go (without DESTDIR), and what the units say.
hald_dir=$prefix/libexec/nnaccel
hald=$hald_dir/nnaccel-hald
ctl=$prefix/bin/nnaccelctl
sim=$prefix/sbin/nnaccel-sim
docdir=$prefix/share/doc/nnaccel
# The committed units are written for the default prefix; other prefixes are substituted.
unit_prefix=/usr/local

# The host is changed (groups, udev, systemd) only for a real install.
live=0
if [ -z "$destdir" ]; then
    live=1
    if [ "$dry_run" = 0 ] && [ "$(id -u)" != 0 ]; then
        die "installing into / needs root (or --destdir DIR to stage, --dry-run to look)"
    fi
fi

# run CMD...: runs it, or prints it under --dry-run.
run() {
    if [ "$dry_run" = 1 ]; then
        printf '+'
        printf ' %q' "$@"
        printf '\n'
    else
        "$@"
    fi
}

# install_file MODE SRC DST: DST under DESTDIR, parent directories created.
install_file() {
    run install -D -m "$1" "$2" "$destdir$3"
}

# install_unit SRC DST: the unit with the prefix substituted.
install_unit() {
    local src=$1 dst=$destdir$2
    if [ "$dry_run" = 1 ]; then
        printf '+ sed s|%s/|%s/|g %q > %q\n' "$unit_prefix" "$prefix" "$src" "$dst"
        return
    fi
    local tmp
    tmp=$(mktemp)
    sed "s|$unit_prefix/|$prefix/|g" "$src" > "$tmp"
    install -D -m 0644 "$tmp" "$dst"
    rm -f "$tmp"
}

remove() {
    local p=$destdir$1
    if [ -e "$p" ] || [ -L "$p" ]; then
        run rm -f "$p"
    fi
}

remove_dir_if_empty() {
    local p=$destdir$1
    if [ -d "$p" ] && [ -z "$(ls -A "$p")" ]; then
        run rmdir "$p"
    fi
}

systemd_running() { [ "$live" = 1 ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; }
udev_available() { [ "$live" = 1 ] && command -v udevadm >/dev/null 2>&1; }

units=(nnaccel-hald.socket nnaccel-hald.service)
docs=(service.md protocol.md caching.md)

if [ "$uninstall" = 1 ]; then
    if systemd_running; then
        run systemctl disable --now "${units[@]}" || true
    fi
    for u in "${units[@]}"; do remove "$unitdir/$u"; done
    remove "$udevdir/70-nnaccel.rules"
    remove "$hald"
    remove "$ctl"
    remove "$sim"
    for d in "${docs[@]}"; do remove "$docdir/$d"; done
    remove_dir_if_empty "$hald_dir"
    remove_dir_if_empty "$docdir"
    # The configuration goes only if it is still the example, untouched.
    if [ -f "$destdir$confdir/hald.toml" ] \
        && cmp -s "$destdir$confdir/hald.toml" "$repo/systemd/hald.toml.example"; then
        remove "$confdir/hald.toml"
        remove_dir_if_empty "$confdir"
    elif [ -f "$destdir$confdir/hald.toml" ]; then
        echo "install.sh: keeping $destdir$confdir/hald.toml (edited)"
    fi
    if systemd_running; then
        run systemctl daemon-reload
    fi
    if udev_available; then
        run udevadm control --reload || true
    fi
    if [ "$dry_run" = 1 ]; then
        echo "Dry run, nothing changed."
    else
        echo "nnaccel uninstalled${destdir:+ from $destdir}."
    fi
    exit 0
fi

release=$target_dir/release
if [ "$build" = 1 ]; then
    command -v cargo >/dev/null 2>&1 || die "cargo not found: build first as a user, then rerun with --no-build"
    (cd "$repo" && run env CARGO_TARGET_DIR="$target_dir" cargo build --release --locked \
        -p nnaccel-service -p nnaccelctl -p nnaccel-kmod-sim --bin nnaccel-hald --bin nnaccelctl --bin nnaccel-sim)
fi
for b in nnaccel-hald nnaccelctl nnaccel-sim; do
    if [ ! -x "$release/$b" ] && [ "$dry_run" = 0 ]; then
        die "$release/$b is missing: build it (cargo build --release) or drop --no-build"
    fi
done

# The socket's and the nodes' group.
if [ "$live" = 1 ] && ! getent group render >/dev/null 2>&1; then
    run groupadd --system render
fi

install_file 0755 "$release/nnaccel-hald" "$hald"
install_file 0755 "$release/nnaccelctl" "$ctl"
install_file 0755 "$release/nnaccel-sim" "$sim"
for u in "${units[@]}"; do
    install_unit "$repo/systemd/$u" "$unitdir/$u"
done
install_file 0644 "$repo/udev/70-nnaccel.rules" "$udevdir/70-nnaccel.rules"
for d in "${docs[@]}"; do
    if [ -f "$repo/docs/$d" ]; then
        install_file 0644 "$repo/docs/$d" "$docdir/$d"
    fi
done
if [ -e "$destdir$confdir/hald.toml" ]; then
    echo "install.sh: keeping the existing $destdir$confdir/hald.toml"
else
    install_file 0644 "$repo/systemd/hald.toml.example" "$confdir/hald.toml"
fi

if udev_available; then
    # New rules for nodes that already exist, too.
    run udevadm control --reload || echo "install.sh: udevadm control --reload failed (udevd not running?)" >&2
    run udevadm trigger --action=change --subsystem-match=dma_heap || true
    run udevadm trigger --action=change --sysname-match=nnaccel || true
fi
if systemd_running; then
    run systemctl daemon-reload
fi

done_what="nnaccel installed"
[ "$dry_run" = 1 ] && done_what="Dry run, nothing changed. nnaccel would be installed"
cat <<EOF

$done_what${destdir:+ under $destdir}:
  $hald
  $ctl
  $sim
  $unitdir/nnaccel-hald.socket, nnaccel-hald.service
  $udevdir/70-nnaccel.rules
  $confdir/hald.toml

To start the service (socket-activated: it starts on the first client):
  systemctl daemon-reload
  systemctl enable --now nnaccel-hald.socket
  systemctl status nnaccel-hald.socket nnaccel-hald.service
Clients need the group 'render' (usermod -aG render USER) for /run/nnaccel/hal.sock.

Without an accelerator, the simulated device (as root, before the service's first start, or
restart the service afterwards):
  nnaccel-sim --path /dev/nnaccel
Then:
  nnaccelctl info
EOF
