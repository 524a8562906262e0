#!/usr/bin/env bash
# Self-test of the QEMU pipeline: build the static probe, boot the guest, run it there.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
Usage: $(basename "$0") [--dir DIR] [--help]

Builds probe.c statically (cc -static), writes a guest-run.sh that runs it, boots the guest
with run.sh and reports. The probe checks /dev/dma_heap/system (1 MiB allocation + mmap),
/dev/udmabuf, /dev/cuse and io_uring FUTEX_WAIT/WAKE inside the guest.

Options:
  --dir DIR  the directory shared with the guest (default: \$NNACCEL_QEMU_CACHE/selftest);
             it is emptied first and keeps serial.log and result afterwards
  --help     this text

Environment: those of run.sh (QEMU_TIMEOUT, QEMU_QUIET, ...) and NNACCEL_QEMU_CACHE.
EOF
}

dir=""
while (($#)); do
    case "$1" in
        --dir) dir="${2:?--dir needs a directory}"; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; qemu_die "unknown argument: $1" ;;
    esac
    shift
done
dir="${dir:-$NNACCEL_QEMU_CACHE/selftest}"

qemu_install_host_tools cc:gcc
if [[ ! -f /usr/lib/x86_64-linux-gnu/libc.a ]]; then
    qemu_install_host_tools /usr/lib/x86_64-linux-gnu/libc.a:libc6-dev
fi

mkdir -p "$dir"
rm -f "$dir/probe" "$dir/guest-run.sh" "$dir/serial.log" "$dir/result" "$dir/probe.out"
qemu_log "building the probe (cc -static)"
cc -static -O2 -Wall -Wextra -Werror -o "$dir/probe" "$SCRIPT_DIR/probe.c"

cat >"$dir/guest-run.sh" <<'EOF'
#!/bin/sh
# Written by selftest.sh: runs the static probe in the guest, output also kept in probe.out.
cd /mnt || exit 2
/mnt/probe >/mnt/probe.out 2>&1
rc=$?
cat /mnt/probe.out
exit "$rc"
EOF
chmod 755 "$dir/guest-run.sh"

set +e
"$SCRIPT_DIR/run.sh" "$dir"
rc=$?
set -e

echo
echo "== selftest report"
if [[ -f "$dir/probe.out" ]]; then
    # Streamed above already, unless QEMU_QUIET=1.
    if [[ "${QEMU_QUIET:-0}" == 1 ]]; then cat "$dir/probe.out"; else grep -E '^(FAIL|probe):' "$dir/probe.out"; fi
else
    echo "(no probe output came back)"
fi
if ((rc == 0)); then
    qemu_log "selftest PASSED (serial log: $dir/serial.log)"
else
    qemu_log "selftest FAILED with status $rc (serial log: $dir/serial.log)"
fi
exit "$rc"
