#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting and lints, the aarch64 cross check (and the
# CPU executor's unit tests on aarch64 under qemu-user), unit tests, the integration
# tests that run the simulated device on FUSE (they need root and /dev/fuse; with CI=true they
# fail rather than skip when those are missing), then the QEMU tier (scripts/qemu/suite.sh:
# the same suites inside a Debian 6.12 guest, with CUSE, dma-heap, udmabuf, io_uring futex).
#
#   scripts/test.sh            everything
#   scripts/test.sh --quick    unit tests only (no FUSE, no root, no QEMU)
#   NNACCEL_SKIP_QEMU=1        skip the QEMU tier (locally; ignored when CI=true)
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
for arg in "$@"; do
    case "$arg" in
        --quick) quick=1 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "test.sh: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

scripts/setup.sh

step() { printf '\n==> %s\n' "$*"; }
started=$SECONDS

# A fresh clone builds everything twice (the host build and the QEMU tier's static one). With
# incremental state and full debug info that is about 12 GiB of target/; a linker that runs out
# of disk dies of SIGBUS mid-write, which says nothing about the cause. Under CI nothing is
# rebuilt incrementally, and line tables keep backtraces readable at a third of the size. The
# settings apply only under CI=true: locally they would make every switch between this script
# and a plain `cargo test` rebuild the workspace. A caller's own values win.
if [ "${CI:-}" = true ]; then
    export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
    export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
fi
mkdir -p target
# (0 when df gives nothing usable: the warning below then shows.)
free_kib=$(df -Pk target | awk 'NR == 2 && $4 ~ /^[0-9]+$/ { print $4 }') || true
free_kib=${free_kib:-0}
echo "free disk under target/: $((free_kib / 1024 / 1024)) GiB"
if [ "$free_kib" -lt $((6 * 1024 * 1024)) ]; then
    echo "warning: less than 6 GiB free under target/; the builds below may fail for want of disk" >&2
fi

step "formatting"
cargo fmt --all -- --check

step "lints (clippy, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "aarch64 (cargo check of every crate and target for aarch64-unknown-linux-gnu)"
# setup.sh adds the target; add it here too when rustup is there but setup could not.
rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu \
    || rustup target add aarch64-unknown-linux-gnu
cargo check --workspace --all-targets --locked --target aarch64-unknown-linux-gnu

step "layering (crates import only the layers below them; no module circles)"
python3 scripts/check-layers.py --self-test
python3 scripts/check-layers.py

if [ "$quick" = 1 ]; then
    step "unit tests"
    cargo test --workspace --locked --lib --bins
    exit 0
fi

step "build"
cargo build --workspace --all-targets --locked
# The external TFLite delegate (a cdylib LiteRT dlopens, target/debug/libnnaccel_tflite_delegate.so)
# in the profile the tests use: tests/tflite_delegate.rs loads it into LiteRT.
cargo build -p nnaccel-tflite-delegate --lib --locked

step "operation coverage table (docs/operations.md matches the code and its tests)"
scripts/gen-operations.sh --check

step "CPU executor unit tests on aarch64 (qemu-user)"
# Linker and runner set for this command only, so host builds are unaffected. The crate's
# unit tests (its whole suite: about a minute with the cross build on 2 cores). `-cpu max` has
# FEAT_FP16, so the float16 GEMM of relaxed models runs; NNACCEL_EXPECT_FP16 makes a test
# fail if it was not found rather than let the float32 fallback pass unseen.
if command -v qemu-aarch64 >/dev/null 2>&1 && command -v aarch64-linux-gnu-gcc >/dev/null 2>&1; then
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu" \
    NNACCEL_EXPECT_FP16=1 \
        cargo test -p nnaccel-cpu --locked --lib --target aarch64-unknown-linux-gnu
elif [ "${CI:-}" = true ]; then
    echo "error: qemu-aarch64 or aarch64-linux-gnu-gcc missing (scripts/setup.sh installs them)" >&2
    exit 1
else
    echo "skipped: qemu-aarch64 or aarch64-linux-gnu-gcc missing (scripts/setup.sh installs them)"
fi

step "tests (unit and integration)"
if [ "$(id -u)" != 0 ] || [ ! -c /dev/fuse ]; then
    echo "note: integration tests need root and /dev/fuse; they will report SKIPPED here" \
         "(and fail under CI=true)" >&2
fi
cargo test --workspace --locked --no-fail-fast

step "QEMU guest tests (real kernel: CUSE, dma-heap, udmabuf, io_uring futex)"
if [ "${NNACCEL_SKIP_QEMU:-0}" = 1 ] && [ "${CI:-}" = true ]; then
    echo "warning: NNACCEL_SKIP_QEMU=1 is ignored under CI=true: the QEMU tier must run" >&2
    scripts/qemu/suite.sh
elif [ "${NNACCEL_SKIP_QEMU:-0}" = 1 ]; then
    echo "skipped (NNACCEL_SKIP_QEMU=1)"
else
    scripts/qemu/suite.sh
fi

step "done in $((SECONDS - started)) s"
