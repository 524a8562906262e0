#!/usr/bin/env bash
# Installs what the build and tests need on a Debian machine. Idempotent and quiet when
# everything is already there. Runs apt-get only as root; otherwise says what is missing.
set -euo pipefail

missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v cargo >/dev/null 2>&1 || { echo "setup.sh: cargo is required (rustup)" >&2; exit 1; }
[ -e /dev/fuse ] || missing+=(fuse3)
# scripts/check-layers.py, the layering check.
command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-venv)
# scripts/litert-venv.sh (the LiteRT venv of tests/litert.rs and the model bench): Debian's
# python3 makes venvs only with python3-venv (ensurepip).
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
# scripts/litert-venv.sh tflite-runtime (tests/tflite_delegate.rs): tflite-runtime 2.14 has
# wheels for CPython <= 3.11 only (Debian 12's python3.11) and its library links libstdc++.
if ! command -v python3.11 >/dev/null 2>&1 || ! python3.11 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    missing+=(python3.11 python3.11-venv)
fi
[ -e /usr/lib/x86_64-linux-gnu/libstdc++.so.6 ] || [ -e /usr/lib/aarch64-linux-gnu/libstdc++.so.6 ] \
    || missing+=(libstdc++6)
# tests/systemd.rs: `systemd-analyze verify` on the units, `systemd-socket-activate`.
{ command -v systemd-analyze && command -v systemd-socket-activate; } >/dev/null 2>&1 || missing+=(systemd)
# scripts/test.sh's aarch64 tier: the CPU executor's unit tests cross-built and run under
# qemu-user (linker, target libc, emulator).
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || missing+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ] || missing+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null 2>&1 || missing+=(qemu-user)

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup.sh: installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "setup.sh: missing packages: ${missing[*]} (run as root to install them)" >&2
    fi
fi

# The FUSE module (a no-op where it is built in or already loaded).
if [ ! -e /dev/fuse ] && [ "$(id -u)" = 0 ]; then
    modprobe fuse 2>/dev/null || true
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt >/dev/null 2>&1 || true
# The aarch64 target for scripts/test.sh's cross check (idempotent).
rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu \
    || rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 || true
