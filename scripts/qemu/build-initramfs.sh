#!/usr/bin/env bash
# Build the busybox-static initramfs for the QEMU guest (see usage).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

# Modules the guest loads (with their dependencies), in this order. brd + ext4 give /var/tmp a
# disk filesystem (ext2 on a RAM disk): files there are not shmem, and unlike files on the 9p
# share they can still be truncated after being unlinked (tempfiles). ext4 asks the crypto API
# for crc32c at mount time, which modules.dep does not record: crc32c_generic is listed.
GUEST_MODULES=(cuse netfs 9pnet 9pnet_virtio 9p brd crc32c_generic ext4)
declare -A MODPARAMS=([brd]="rd_nr=1 rd_size=262144")

usage() {
    cat <<EOF
Usage: $(basename "$0") [--modules DIR] [--output FILE] [--force] [--help]

Builds a gzip'd cpio initramfs around busybox-static whose /init mounts proc, sysfs,
devtmpfs, loads ${GUEST_MODULES[*]} (and their dependencies, decompressed), puts
/var/tmp on ext2 over a RAM disk,
mounts the 9p share with mount_tag 'nnaccel' at /mnt (and, with nnaccel.hostdir=PATH on the
kernel command line, at PATH too), runs /mnt/guest-run.sh, writes its exit
status to /mnt/result (and to the serial console), signals it through isa-debug-exit
(port 0xf4: 0 = passed, 1 = failed) and powers off. Prints the image's path on stdout.

Options:
  --modules DIR  lib/modules/<kver> of the guest kernel (default: from fetch-kernel.sh)
  --output FILE  where to write the image (default: \$NNACCEL_QEMU_CACHE/initramfs-<kver>.cpio.gz)
  --force        rebuild even when the cached image is up to date
  --help         this text

Environment:
  NNACCEL_QEMU_CACHE  cache directory (default /var/cache/nnaccel-qemu)
EOF
}

modules=""
output=""
force=0
while (($#)); do
    case "$1" in
        --modules) modules="${2:?--modules needs a directory}"; shift ;;
        --output) output="${2:?--output needs a file}"; shift ;;
        --force) force=1 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; qemu_die "unknown argument: $1" ;;
    esac
    shift
done

qemu_install_host_tools /bin/busybox:busybox-static cpio:cpio gzip:gzip xz:xz-utils zstd:zstd

if [[ -z "$modules" ]]; then
    kinfo="$("$SCRIPT_DIR/fetch-kernel.sh")" || qemu_die "fetch-kernel.sh failed"
    modules="$(sed -n 's/^MODULES=//p' <<<"$kinfo")"
fi
[[ -d "$modules/kernel" ]] || qemu_die "not a modules directory: $modules"
kver="$(basename "$modules")"

busybox=/bin/busybox
"$busybox" --help >/dev/null 2>&1 || qemu_die "$busybox does not run"
if ldd "$busybox" >/dev/null 2>&1; then
    qemu_die "$busybox is dynamically linked; install busybox-static"
fi

default_output=0
if [[ -z "$output" ]]; then
    output="$NNACCEL_QEMU_CACHE/initramfs-$kver.cpio.gz"
    default_output=1
fi
# The image depends on this script, the modules tree and busybox: rebuild when any changes.
stamp="$(cat "$0" "$busybox" | sha256sum | cut -c1-16)-$kver-$(stat -c %Y "$modules")"
if ((!force)) && [[ -f "$output" && -f "$output.stamp" ]] && [[ "$(cat "$output.stamp")" == "$stamp" ]]; then
    printf '%s\n' "$output"
    exit 0
fi

# ---------------------------------------------------------------- module dependency resolution
# name (with '-' as '_') -> path relative to $modules
declare -A MODPATH=()
declare -A BUILTIN=()
while IFS= read -r rel; do
    base="${rel##*/}"
    name="${base%%.ko*}"
    MODPATH["${name//-/_}"]="$rel"
done < <(cd "$modules" && find kernel -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' -o -name '*.ko.gz')
if [[ -f "$modules/modules.builtin" ]]; then
    while IFS= read -r rel; do
        base="${rel##*/}"
        name="${base%%.ko*}"
        BUILTIN["${name//-/_}"]=1
    done <"$modules/modules.builtin"
fi

# modules.dep when the tree has one (Debian's image package ships none: depmod makes it at
# install time), else the "depends=" field of the module's .modinfo section.
declare -A DEPLINE=()
if [[ -f "$modules/modules.dep" ]]; then
    while IFS= read -r line; do
        key="${line%%:*}"
        base="${key##*/}"
        name="${base%%.ko*}"
        DEPLINE["${name//-/_}"]="${line#*:}"
    done <"$modules/modules.dep"
fi

decompress() { # path -> uncompressed bytes on stdout
    case "$1" in
        *.ko.xz) xz -dc "$1" ;;
        *.ko.zst) zstd -qdc "$1" ;;
        *.ko.gz) gzip -dc "$1" ;;
        *.ko) cat "$1" ;;
        *) qemu_die "unknown module format: $1" ;;
    esac
}

direct_deps() { # name -> dependency names, one a line
    local name="$1" dep base
    if [[ -n "${DEPLINE[$name]+x}" ]]; then
        for dep in ${DEPLINE[$name]}; do
            base="${dep##*/}"
            base="${base%%.ko*}"
            printf '%s\n' "${base//-/_}"
        done
    else
        decompress "$modules/${MODPATH[$name]}" | tr '\0' '\n' | sed -n 's/^depends=//p' | head -n1 \
            | tr ',' '\n' | sed '/^$/d; s/-/_/g'
    fi
}

declare -A SEEN=()
ORDER=()
resolve() { # depth-first: dependencies before the module itself
    local name="${1//-/_}" dep
    [[ -n "${SEEN[$name]+x}" ]] && return 0
    SEEN["$name"]=1
    if [[ -n "${BUILTIN[$name]+x}" ]]; then
        qemu_log "module $name is built in"
        return 0
    fi
    [[ -n "${MODPATH[$name]+x}" ]] || qemu_die "module $name not found under $modules"
    while IFS= read -r dep; do
        resolve "$dep"
    done < <(direct_deps "$name")
    ORDER+=("$name")
}
for m in "${GUEST_MODULES[@]}"; do
    resolve "$m"
done
qemu_log "guest modules, in load order: ${ORDER[*]}"

# ---------------------------------------------------------------- the tree
work="$(mktemp -d "${TMPDIR:-/tmp}/nnaccel-initramfs.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,mnt,tmp,run,root,etc,lib/modules,var/tmp}
cp "$busybox" "$root/bin/busybox"
while IFS= read -r applet; do
    applet="${applet#/}"
    [[ -n "$applet" && "$applet" != bin/busybox && ! -e "$root/$applet" ]] || continue
    mkdir -p "$root/$(dirname "$applet")"
    ln -s /bin/busybox "$root/$applet"
done < <("$busybox" --list-full)
[[ -e "$root/bin/sh" ]] || ln -s /bin/busybox "$root/bin/sh"

: >"$root/etc/modules.order"
for name in "${ORDER[@]}"; do
    decompress "$modules/${MODPATH[$name]}" >"$root/lib/modules/$name.ko"
    printf '%s %s\n' "$name" "${MODPARAMS[$name]:-}" >>"$root/etc/modules.order"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nrender:x:105:\nnogroup:x:65534:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"

cat >"$root/init" <<'INIT'
#!/bin/sh
# nnaccel QEMU guest init: mount, load modules, mount the 9p share, run the payload, report.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TERM=dumb
uptime_s() { cut -d' ' -f1 /proc/uptime; }

# isa-debug-exit (port 0xf4): QEMU exits at once with status (value << 1) | 1.
debug_exit() { # 0 = passed, anything else = failed
    if [ "$1" = 0 ]; then printf '\000'; else printf '\001'; fi \
        | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
}
finish() { # rc
    echo "NNACCEL-RESULT: $1 (uptime $(uptime_s)s)"
    sync
    debug_exit "$1"
    poweroff -f
    while :; do sleep 60; done
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs tmpfs /run
ip link set lo up 2>/dev/null
hostname nnaccel-guest
echo "NNACCEL-INIT: kernel $(uname -r), uptime $(uptime_s)s"

while read -r m params; do
    # shellcheck disable=SC2086 # module parameters, one word each
    insmod "/lib/modules/$m.ko" $params || echo "NNACCEL-INIT: insmod $m failed"
done </etc/modules.order

# /var/tmp: ext2 on a 256 MiB RAM disk (a disk filesystem, not shmem).
if [ -b /dev/ram0 ] && mke2fs -q /dev/ram0 >/dev/null 2>&1 && mount -t ext2 /dev/ram0 /var/tmp; then
    chmod 1777 /var/tmp
else
    echo "NNACCEL-INIT: no disk filesystem for /var/tmp (brd/ext4); it stays on the rootfs"
fi

if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 nnaccel /mnt; then
    echo "NNACCEL-INIT: mounting the 9p share 'nnaccel' failed"
    finish 201
fi
# run.sh --src SRCDIR passes nnaccel.srcdir=SRCDIR: the read-only source share, mounted at its
# host path first (the payload share may lie inside it and is bind-mounted over it below).
srcdir=$(sed -n 's/.*nnaccel\.srcdir=\([^ ]*\).*/\1/p' /proc/cmdline)
case "$srcdir" in
    "" | / | /mnt | /mnt/* | /proc | /proc/* | /sys | /sys/* | /dev | /dev/*) ;;
    *)
        if mkdir -p "$srcdir" \
            && mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=262144 nnaccelsrc "$srcdir"; then
            export NNACCEL_SRC_DIR="$srcdir"
        else
            echo "NNACCEL-INIT: mounting the source share at $srcdir failed"
        fi
        ;;
esac
# run.sh passes the share's host path as nnaccel.hostdir=PATH: mount the share there too, so
# host paths compiled into test binaries (CARGO_BIN_EXE_*, CARGO_MANIFEST_DIR) resolve.
hostdir=$(sed -n 's/.*nnaccel\.hostdir=\([^ ]*\).*/\1/p' /proc/cmdline)
case "$hostdir" in
    "" | / | /mnt | /mnt/* | /proc | /proc/* | /sys | /sys/* | /dev | /dev/*) ;;
    *)
        if mkdir -p "$hostdir" && mount --bind /mnt "$hostdir"; then
            export NNACCEL_HOST_DIR="$hostdir"
        else
            echo "NNACCEL-INIT: bind-mounting the share at $hostdir failed"
        fi
        ;;
esac
if [ ! -x /mnt/guest-run.sh ]; then
    echo "NNACCEL-INIT: /mnt/guest-run.sh missing or not executable"
    finish 202
fi
rm -f /mnt/result
echo "NNACCEL-PAYLOAD-START: uptime $(uptime_s)s"
cd /mnt && /mnt/guest-run.sh </dev/console
rc=$?
echo "NNACCEL-PAYLOAD-END: uptime $(uptime_s)s"
echo "$rc" >/mnt/result.tmp && mv /mnt/result.tmp /mnt/result
finish "$rc"
INIT
chmod 755 "$root/init"

mkdir -p "$(dirname "$output")"
(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) \
    | gzip -9 >"$output.$$"
mv "$output.$$" "$output"
printf '%s\n' "$stamp" >"$output.stamp"
if ((default_output)); then
    # Images of kernels no longer cached.
    for old in "$NNACCEL_QEMU_CACHE"/initramfs-*.cpio.gz; do
        [[ "$old" == "$output" ]] || rm -f "$old" "$old.stamp"
    done
fi
qemu_log "initramfs $output ($(du -h "$output" | cut -f1))"
printf '%s\n' "$output"
