#!/usr/bin/env bash
# Fetch Debian's newest 6.12+ amd64 kernel (linux-image-*-amd64-unsigned from bookworm-backports)
# with a private apt configuration and unpack it into the cache. Nothing is installed on the host.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
Usage: $(basename "$0") [--refresh] [--help]

Finds the newest linux-image-6.12+-amd64-unsigned in Debian bookworm-backports (and bookworm)
through a private apt configuration under the cache directory, downloads it with
'apt-get download', unpacks it with 'dpkg-deb -x' and prints, on stdout:

  KVER=<kernel release>
  KERNEL=<path of vmlinuz>
  MODULES=<path of lib/modules/KVER>

(shell assignments: eval "\$($(basename "$0"))"). Progress goes to stderr.

The cache is reused: the package lists are refreshed when older than
NNACCEL_QEMU_REFRESH_HOURS (default 24), and when the refresh fails (offline) the kernel
already unpacked is used.

Options:
  --refresh   refresh the package lists now, whatever their age
  --help      this text

Environment:
  NNACCEL_QEMU_CACHE          cache directory (default /var/cache/nnaccel-qemu)
  NNACCEL_QEMU_REFRESH_HOURS  list age that triggers a refresh (default 24)
  NNACCEL_DEBIAN_MIRROR       Debian mirror URL (default: the one the host's apt uses)
  NNACCEL_KERNEL_PACKAGE      use this exact package instead of the newest
EOF
}

refresh=0
while (($#)); do
    case "$1" in
        --refresh) refresh=1 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; qemu_die "unknown argument: $1" ;;
    esac
    shift
done

# The Debian mirror the host's own apt configuration uses (the network reaches only those).
# Reads one-line (.list) and deb822 (.sources) files; skips debian-security and other archives.
host_debian_mirror() {
    local f line
    local -a files=()
    [[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
    for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [[ -f "$f" ]] && files+=("$f")
    done
    ((${#files[@]})) || return 1
    # One-line format: deb [opts] URI suite components...
    # deb822: "URIs: URI [URI...]".
    while IFS= read -r line; do
        line="${line%%#*}"
        local uri=""
        if [[ "$line" =~ ^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+) ]]; then
            uri="${BASH_REMATCH[2]}"
        elif [[ "$line" =~ ^[[:space:]]*URIs:[[:space:]]*([^[:space:]]+) ]]; then
            uri="${BASH_REMATCH[1]}"
        fi
        uri="${uri%/}"
        if [[ "$uri" =~ ^https?://[^/]+/(.*/)?debian$ ]]; then
            printf '%s\n' "$uri"
            return 0
        fi
    done < <(cat "${files[@]}")
    return 1
}

qemu_install_host_tools apt-get:apt dpkg-deb:dpkg

CACHE="$NNACCEL_QEMU_CACHE"
APTDIR="$CACHE/apt"
mkdir -p "$APTDIR/state/lists/partial" "$APTDIR/cache/archives/partial" "$APTDIR/etc/sources.list.d" \
    "$APTDIR/etc/preferences.d" "$CACHE/debs" "$CACHE/kernels"
: >"$APTDIR/state/status.empty"

mirror="${NNACCEL_DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
    mirror="$(host_debian_mirror || true)"
    if [[ -z "$mirror" ]]; then
        mirror="http://deb.debian.org/debian"
        qemu_log "no Debian mirror found in /etc/apt; using $mirror"
    fi
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[[ -f "$keyring" ]] || qemu_die "$keyring missing (package debian-archive-keyring)"

sources="$APTDIR/etc/sources.list"
want_sources="deb [signed-by=$keyring] $mirror bookworm-backports main
deb [signed-by=$keyring] $mirror bookworm main"
if [[ ! -f "$sources" ]] || [[ "$(cat "$sources")" != "$want_sources" ]]; then
    printf '%s\n' "$want_sources" >"$sources"
    refresh=1
fi

# Every apt call goes through these options: own sources (and no host source parts), own state,
# own empty dpkg status, own cache, amd64 only, no translations.
APT_OPTS=(
    -o "Dir::Etc::SourceList=$sources"
    -o "Dir::Etc::SourceParts=$APTDIR/etc/sources.list.d"
    -o "Dir::Etc::Preferences=$APTDIR/etc/preferences"
    -o "Dir::Etc::PreferencesParts=$APTDIR/etc/preferences.d"
    -o "Dir::State=$APTDIR/state"
    -o "Dir::State::Lists=$APTDIR/state/lists"
    -o "Dir::State::status=$APTDIR/state/status.empty"
    -o "Dir::Cache=$APTDIR/cache"
    -o "Dir::Cache::Archives=$APTDIR/cache/archives"
    -o "APT::Architecture=amd64"
    -o "APT::Architectures=amd64"
    -o "Acquire::Languages=none"
    -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false"
    -o "APT::Sandbox::User=root"
)

current="$CACHE/kernels/current.env"
lists_stamp="$APTDIR/state/lists/.updated"
max_age_min=$((${NNACCEL_QEMU_REFRESH_HOURS:-24} * 60))
if ((!refresh)); then
    if [[ ! -f "$lists_stamp" ]] || [[ -n "$(find "$lists_stamp" -mmin +"$max_age_min" -print)" ]]; then
        refresh=1
    fi
fi

# The kernel recorded in current.env is still unpacked.
cached_ok() {
    [[ -f "$current" ]] || return 1
    local k m
    k="$(sed -n 's/^KERNEL=//p' "$current")"
    m="$(sed -n 's/^MODULES=//p' "$current")"
    [[ -n "$k" && -f "$k" && -n "$m" && -d "$m" ]]
}

if ((refresh)); then
    qemu_log "apt-get update (private config, mirror $mirror)"
    if apt-get "${APT_OPTS[@]}" -q --error-on=any update >&2; then
        touch "$lists_stamp"
    elif cached_ok; then
        qemu_log "warning: apt-get update failed; using the cached kernel"
        cat "$current"
        exit 0
    else
        qemu_die "apt-get update failed and no kernel is cached"
    fi
elif [[ -f "$current" ]] && [[ -z "${NNACCEL_KERNEL_PACKAGE:-}" ]]; then
    # Fresh lists and a kernel already unpacked from them: nothing to do.
    if cached_ok; then
        cat "$current"
        exit 0
    fi
fi

# The newest linux-image-<6.12 or later>-amd64-unsigned.
pick_package() {
    local name ver major minor best="" bestver=""
    while IFS= read -r name; do
        [[ "$name" =~ ^linux-image-(([0-9]+)\.([0-9]+)[^-]*(-[0-9]+)?(\+bpo)?)-amd64-unsigned$ ]] || continue
        major="${BASH_REMATCH[2]}"
        minor="${BASH_REMATCH[3]}"
        ((major > 6 || (major == 6 && minor >= 12))) || continue
        ver="${BASH_REMATCH[1]}"
        if [[ -z "$best" ]] || [[ "$(printf '%s\n%s\n' "$bestver" "$ver" | sort -V | tail -n1)" == "$ver" ]]; then
            best="$name"
            bestver="$ver"
        fi
    done < <(apt-cache "${APT_OPTS[@]}" pkgnames linux-image-)
    [[ -n "$best" ]] || return 1
    printf '%s\n' "$best"
}

pkg="${NNACCEL_KERNEL_PACKAGE:-}"
if [[ -z "$pkg" ]]; then
    pkg="$(pick_package)" || qemu_die "no linux-image-6.12+-amd64-unsigned found in bookworm-backports"
fi
pkgver="$(apt-cache "${APT_OPTS[@]}" show --no-all-versions "$pkg" 2>/dev/null | sed -n "s/^Version: //p" | head -n1 || true)"
[[ -n "$pkgver" ]] || qemu_die "package $pkg not found"
qemu_log "kernel package: $pkg $pkgver"

dest="$CACHE/kernels/${pkg}_${pkgver}"
if [[ ! -f "$dest/.unpacked" ]]; then
    deb="$(find "$CACHE/debs" -maxdepth 1 -name "${pkg}_${pkgver//:/%3a}_amd64.deb" -print -quit)"
    if [[ -z "$deb" ]]; then
        qemu_log "apt-get download $pkg=$pkgver"
        (cd "$CACHE/debs" && apt-get "${APT_OPTS[@]}" -q download "$pkg=$pkgver" >&2) \
            || qemu_die "apt-get download $pkg=$pkgver failed"
        deb="$(find "$CACHE/debs" -maxdepth 1 -name "${pkg}_*_amd64.deb" -newer "$sources" -print -quit)"
        [[ -n "$deb" ]] || deb="$(find "$CACHE/debs" -maxdepth 1 -name "${pkg}_*_amd64.deb" -print -quit)"
        [[ -n "$deb" ]] || qemu_die "downloaded .deb for $pkg not found in $CACHE/debs"
        qemu_log "downloaded $(basename "$deb") ($(du -h "$deb" | cut -f1))"
    fi
    # Unpack beside the destination and move it in place: a concurrent run never sees half a tree.
    unpack="$(mktemp -d "$dest.XXXXXX")"
    qemu_log "dpkg-deb -x $(basename "$deb")"
    dpkg-deb -x "$deb" "$unpack" || { rm -rf "$unpack"; qemu_die "dpkg-deb -x $deb failed"; }
    touch "$unpack/.unpacked"
    rm -rf "$dest"
    mv -T "$unpack" "$dest" 2>/dev/null || rm -rf "$unpack"
    [[ -f "$dest/.unpacked" ]] || qemu_die "unpacking into $dest failed"
    # Keep one kernel: drop older builds' trees and packages (and this one's .deb, now unpacked).
    find "$CACHE/kernels" -mindepth 1 -maxdepth 1 -type d ! -name "$(basename "$dest")" \
        -exec rm -rf {} + 2>/dev/null || true
    rm -f "$CACHE"/debs/*.deb
fi

kernel="$(find "$dest/boot" -maxdepth 1 -name 'vmlinuz-*' -print -quit 2>/dev/null || true)"
[[ -n "$kernel" ]] || qemu_die "no vmlinuz in $dest/boot"
kver="${kernel##*/vmlinuz-}"
modules=""
for d in "$dest/lib/modules/$kver" "$dest/usr/lib/modules/$kver"; do
    [[ -d "$d" ]] && { modules="$d"; break; }
done
[[ -n "$modules" ]] || qemu_die "no modules directory for $kver in $dest"

out="KVER=$kver
KERNEL=$kernel
MODULES=$modules"
printf '%s\n' "$out" >"$current.$$"
mv "$current.$$" "$current"
printf '%s\n' "$out"
