#!/usr/bin/env bash
# Boot the Debian 6.12 kernel under QEMU (TCG) and run DIR/guest-run.sh inside (see usage).
set -euo pipefail
shopt -s lastpipe extglob

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
Usage: $(basename "$0") [--kernel FILE] [--initramfs FILE] [--src SRCDIR] [--help] DIR

Boots qemu-system-x86_64 (-accel tcg, no KVM) with Debian's 6.12 kernel (fetch-kernel.sh) and
the busybox initramfs (build-initramfs.sh), shares DIR with the guest over virtio-9p
(mount_tag nnaccel, mounted at /mnt and also at DIR's own path, so host paths compiled into
test binaries resolve) and runs DIR/guest-run.sh there as root, in /mnt, with
NNACCEL_HOST_DIR=DIR.
DIR must hold an executable guest-run.sh; it can only use what DIR and the initramfs hold
(busybox applets, static binaries).

The serial console is streamed to stdout and kept in DIR/serial.log; the payload's exit status
comes back in DIR/result. Prints the boot time (QEMU start to payload start) and the test time
(payload start to result). Exits 0 only when the payload exited 0 and its result came back;
1 when the payload failed; 2 when no result came back (boot failure, timeout, crash).

Options:
  --kernel FILE     vmlinuz to boot (default: fetch-kernel.sh's)
  --initramfs FILE  initramfs to boot (default: build-initramfs.sh's)
  --src SRCDIR      also share SRCDIR read-only (mount_tag nnaccelsrc), mounted at its own
                    path before DIR, so tests find their sources (CARGO_MANIFEST_DIR files)
                    and DIR may lie inside SRCDIR
  --help            this text

Environment:
  QEMU_TIMEOUT        seconds before the guest is killed (default 900)
  QEMU_MEM, QEMU_SMP  guest memory and CPUs (default 2G, 2)
  QEMU_APPEND         extra kernel command line arguments
  QEMU_QUIET=1        do not stream the serial console (it is still logged; its tail is
                      printed on failure)
  NNACCEL_QEMU_CACHE  cache directory (default /var/cache/nnaccel-qemu)
EOF
}

kernel=""
src=""
initramfs=""
dir=""
while (($#)); do
    case "$1" in
        --kernel) kernel="${2:?--kernel needs a file}"; shift ;;
        --initramfs) initramfs="${2:?--initramfs needs a file}"; shift ;;
        --src) src="${2:?--src needs a directory}"; shift ;;
        -h | --help) usage; exit 0 ;;
        -*) usage >&2; qemu_die "unknown option: $1" ;;
        *) [[ -z "$dir" ]] || qemu_die "only one DIR"; dir="$1" ;;
    esac
    shift
done
[[ -n "$dir" ]] || { usage >&2; exit 2; }
[[ -d "$dir" ]] || qemu_die "not a directory: $dir"
dir="$(cd "$dir" && pwd -P)"
[[ -x "$dir/guest-run.sh" ]] || qemu_die "$dir/guest-run.sh missing or not executable"

timeout_s="${QEMU_TIMEOUT:-900}"
[[ "$timeout_s" =~ ^[0-9]+$ ]] || qemu_die "QEMU_TIMEOUT must be a number of seconds"

qemu_install_host_tools qemu-system-x86_64:qemu-system-x86 timeout:coreutils

if [[ -z "$kernel" || -z "$initramfs" ]]; then
    kinfo="$("$SCRIPT_DIR/fetch-kernel.sh")" || qemu_die "fetch-kernel.sh failed"
    [[ -n "$kernel" ]] || kernel="$(sed -n 's/^KERNEL=//p' <<<"$kinfo")"
    if [[ -z "$initramfs" ]]; then
        initramfs="$("$SCRIPT_DIR/build-initramfs.sh" --modules "$(sed -n 's/^MODULES=//p' <<<"$kinfo")")" \
            || qemu_die "build-initramfs.sh failed"
    fi
fi
[[ -f "$kernel" ]] || qemu_die "kernel not found: $kernel"
[[ -f "$initramfs" ]] || qemu_die "initramfs not found: $initramfs"

log="$dir/serial.log"
rm -f "$dir/result" "$dir/result.tmp"
: >"$log"

now_us() { local t="${EPOCHREALTIME//[!0-9]/}"; printf '%s' "$((10#$t))"; }
secs() { printf '%d.%01d' "$(($1 / 1000000))" "$(($1 % 1000000 / 100000))"; }

# The guest mounts the share at its host path too (see build-initramfs.sh), when it is one word.
hostdir_arg=""
[[ "$dir" =~ ^/[^[:space:]]*$ ]] && hostdir_arg=" nnaccel.hostdir=$dir"
src_args=()
if [[ -n "$src" ]]; then
    [[ -d "$src" ]] || qemu_die "not a directory: $src"
    src="$(cd "$src" && pwd -P)"
    [[ "$src" =~ ^/[^[:space:]]*$ ]] || qemu_die "--src must be a path without spaces: $src"
    hostdir_arg+=" nnaccel.srcdir=$src"
    src_args=(-virtfs "local,path=${src//,/,,},mount_tag=nnaccelsrc,security_model=none,readonly=on")
fi

# shellcheck disable=SC2054 # the commas belong to QEMU's option syntax
qemu_cmd=(
    timeout -k 10 "$timeout_s"
    qemu-system-x86_64
    -accel tcg -cpu max -m "${QEMU_MEM:-2G}" -smp "${QEMU_SMP:-2}"
    -nographic -no-reboot -nic none
    -kernel "$kernel" -initrd "$initramfs"
    -append "console=ttyS0 panic=-1 quiet${hostdir_arg} ${QEMU_APPEND:-}"
    -virtfs "local,path=${dir//,/,,},mount_tag=nnaccel,security_model=none"
    "${src_args[@]}"
    -device isa-debug-exit,iobase=0xf4,iosize=0x04
)
qemu_log "booting $(basename "$kernel") (timeout ${timeout_s}s), serial log $log"

t0="$(now_us)"
t_start=""
t_end=""
serial_rc=""
set +e
"${qemu_cmd[@]}" </dev/null 2>&1 | while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line%$'\r'}"
    # Drop the firmware's terminal control sequences (screen clears) from the console.
    line="${line//$'\e'@(c|\[*([0-9;?])[a-zA-Z])/}"
    case "$line" in
        *NNACCEL-PAYLOAD-START*) t_start="$(now_us)" ;;
        *NNACCEL-RESULT:*)
            t_end="$(now_us)"
            serial_rc="${line#*NNACCEL-RESULT: }"
            serial_rc="${serial_rc%% *}"
            ;;
    esac
    printf '%s\n' "$line" >>"$log"
    [[ "${QEMU_QUIET:-0}" == 1 ]] || printf '%s\n' "$line"
done
qemu_status="${PIPESTATUS[0]}"
set -e
t_done="$(now_us)"

# isa-debug-exit gives (value << 1) | 1: 1 = the guest passed, 3 = it failed; 0 = poweroff.
case "$qemu_status" in
    0 | 1 | 3) ;;
    124 | 137) qemu_log "timeout: the guest was killed after ${timeout_s}s" ;;
    *) qemu_log "qemu-system-x86_64 exited with status $qemu_status" ;;
esac

rc=""
if [[ -f "$dir/result" ]]; then
    rc="$(tr -dc '0-9' <"$dir/result")"
fi
if [[ -z "$rc" && -n "$serial_rc" ]]; then
    qemu_log "no $dir/result; using the status printed on the serial console"
    rc="$serial_rc"
fi

if [[ -n "$t_start" ]]; then
    boot="$(secs $((t_start - t0)))"
    test_t="$(secs $(((${t_end:-$t_done}) - t_start)))"
    qemu_log "boot time ${boot}s, test time ${test_t}s, total $(secs $((t_done - t0)))s"
else
    qemu_log "the payload never started (total $(secs $((t_done - t0)))s)"
fi

fail_tail() {
    if [[ "${QEMU_QUIET:-0}" == 1 ]]; then
        qemu_log "last lines of $log:"
        tail -n 60 "$log" >&2
    fi
}
if [[ ! "$rc" =~ ^[0-9]+$ ]]; then
    fail_tail
    qemu_log "FAILED: no result came back from the guest (see $log)"
    exit 2
fi
if [[ "$rc" != 0 ]] || [[ "$qemu_status" == 3 ]]; then
    fail_tail
    qemu_log "FAILED: guest-run.sh exited with status $rc (see $log)"
    exit 1
fi
qemu_log "PASSED: guest-run.sh exited 0"
