# shellcheck shell=bash
# Shared helpers for the scripts in scripts/qemu/. Sourced, never run.

# Where kernels, apt state and initramfs images are cached (outside the repository).
NNACCEL_QEMU_CACHE="${NNACCEL_QEMU_CACHE:-/var/cache/nnaccel-qemu}"

qemu_log() { printf '[qemu] %s\n' "$*" >&2; }
qemu_die() { printf '[qemu] error: %s\n' "$*" >&2; exit 1; }

# Install the host tools the pipeline needs with the host's normal apt, only when missing.
# Pass pairs "command:package". Never installs anything that is already there.
qemu_install_host_tools() {
    local pair cmd pkg missing=()
    for pair in "$@"; do
        cmd="${pair%%:*}"
        pkg="${pair#*:}"
        if ! command -v "$cmd" >/dev/null 2>&1 && ! [[ -x "$cmd" ]]; then
            missing+=("$pkg")
        fi
    done
    ((${#missing[@]})) || return 0
    if [[ "$(id -u)" != 0 ]]; then
        qemu_die "missing host tools (packages: ${missing[*]}); install them as root"
    fi
    qemu_log "installing host tools: ${missing[*]}"
    # A stale or empty package list makes apt-get install fail: update first.
    DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 \
        || qemu_die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
        || qemu_die "apt-get install ${missing[*]} failed"
}
