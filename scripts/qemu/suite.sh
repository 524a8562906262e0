#!/usr/bin/env bash
# The QEMU tier of the test command: static test binaries, the Debian 6.12 guest, the suites
# against its real kernel (CUSE, dma-heap, udmabuf, io_uring futex). See usage.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd -P)"
TRIPLE=x86_64-unknown-linux-gnu

usage() {
    cat <<EOF
Usage: $(basename "$0") [--no-build] [--help]

Builds the workspace's test binaries and nnaccel-sim statically (glibc, crt-static) for the
guest, writes a guest-run.sh payload into the target directory and boots the guest on it with
run.sh (the target directory is the 9p share; the repository is shared read-only too, at its
own path, for tests that read their sources). Inside the guest:

  - the unit tests of uapi, cpu, kmod-sim and the driver crates (not uapi's c_header and
    linux_headers: no C compiler);
  - the ioctl harness and the lifetime tests, once against FUSE and once against CUSE
    (NNACCEL_TEST_FRONTEND=cuse);
  - qemu_kernel (io_uring FutexWait, dma-heap and udmabuf BOs, no queue ring in a dma-buf)
    with NNACCEL_REQUIRE_KERNEL_FEATURES=1, on CUSE;
  - the service suite (tests/service.rs: nnaccel-sim on CUSE, nnaccel-hald, clients), whose
    hardware_buffer_blob pools are real dma-bufs from the guest's dma-heap;
  - the compilation-cache suite (tests/cache.rs) on CUSE;
  - a CUSE check: nnaccel-sim --path /dev/nnaccel-tcheck (frontend auto) logs "(cuse)" and
    makes a character device with a major/minor, which goes away on SIGTERM;
  - nnaccelctl info names dma-heap as the hardware_buffer_blob source.

All with CI=true and NNACCEL_TEST_TIMEOUT_SCALE=${NNACCEL_QEMU_TIMEOUT_SCALE:-4}. Each test binary's
closing "test result:" line is printed; the exit status is run.sh's (0 passed, 1 a test
failed, 2 no result came back).

Options:
  --no-build  reuse the binaries of the last build (and its list of test executables)
  --help      this text

Environment:
  CARGO_TARGET_DIR             where the static build goes (default: target/qemu in the repo);
                               shared with the guest, which mounts it at the same path
  NNACCEL_QEMU_TIMEOUT_SCALE   NNACCEL_TEST_TIMEOUT_SCALE inside the guest (default 4)
  NNACCEL_QEMU_TEST_TIMEOUT    seconds one test binary may run in the guest (default 900)
  QEMU_TIMEOUT                 seconds before the guest is killed (default 2700)
  and those of run.sh (QEMU_QUIET, QEMU_MEM, QEMU_SMP, ...) and NNACCEL_QEMU_CACHE.
EOF
}

build=1
while (($#)); do
    case "$1" in
        --no-build) build=0 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; qemu_die "unknown argument: $1" ;;
    esac
    shift
done

now() { printf '%s' "$SECONDS"; }
t_suite="$(now)"

# Host tools: QEMU, busybox-static, cpio (the image scripts install theirs too), and the static
# glibc the test binaries link.
qemu_install_host_tools qemu-system-x86_64:qemu-system-x86 /bin/busybox:busybox-static cpio:cpio
if [[ ! -f /usr/lib/x86_64-linux-gnu/libc.a ]]; then
    qemu_install_host_tools /usr/lib/x86_64-linux-gnu/libc.a:libc6-dev
fi

# The kernel and the initramfs first: cached, and a network problem shows before the build.
kinfo="$("$SCRIPT_DIR/fetch-kernel.sh")" || qemu_die "fetch-kernel.sh failed"
kernel="$(sed -n 's/^KERNEL=//p' <<<"$kinfo")"
initramfs="$("$SCRIPT_DIR/build-initramfs.sh" --modules "$(sed -n 's/^MODULES=//p' <<<"$kinfo")")" \
    || qemu_die "build-initramfs.sh failed"

target_dir="${CARGO_TARGET_DIR:-$REPO/target/qemu}"
mkdir -p "$target_dir"
target_dir="$(cd "$target_dir" && pwd -P)"
[[ "$target_dir" =~ ^/[^[:space:],]*$ ]] \
    || qemu_die "CARGO_TARGET_DIR must be a path without spaces or commas: $target_dir"
list="$target_dir/qemu-tests.list"
profile_dir="$target_dir/$TRIPLE/debug"

if ((build)); then
    t_build="$(now)"
    qemu_log "building static test binaries into $target_dir (crt-static, --target $TRIPLE)"
    # The same RUSTFLAGS for both commands, so the second reuses everything the first built.
    # With --target, RUSTFLAGS do not reach build scripts and proc macros (which cannot be
    # static).
    export CARGO_TARGET_DIR="$target_dir"
    export RUSTFLAGS='-C target-feature=+crt-static'
    unset CARGO_ENCODED_RUSTFLAGS
    json="$target_dir/qemu-tests.json"
    (cd "$REPO" && cargo test --no-run --locked --target "$TRIPLE" --workspace \
        --message-format=json-render-diagnostics) >"$json"
    (cd "$REPO" && cargo build --locked --target "$TRIPLE" -p nnaccel-kmod-sim -p nnaccel-service -p nnaccelctl --bins)
    # "<package dir> <kind> <name> <executable>" for every test harness just built.
    sed -n 's|.*"manifest_path":"\([^"]*\)/Cargo.toml","target":{"kind":\["\([^"]*\)"\],"crate_types":\[[^]]*\],"name":"\([^"]*\)".*"profile":{[^}]*"test":true}.*"executable":"\([^"]*\)".*|\1 \2 \3 \4|p' \
        "$json" | sed "s|^$REPO/||" >"$list.tmp"
    [[ -s "$list.tmp" ]] || qemu_die "no test executables in cargo's output ($json)"
    mv "$list.tmp" "$list"
    qemu_log "static build done in $(($(now) - t_build)) s ($(wc -l <"$list") test binaries)"
fi
[[ -s "$list" ]] || qemu_die "no list of test binaries ($list): build first (without --no-build)"
for bin in nnaccel-sim nnaccel-hald nnaccelctl; do
    [[ -x "$profile_dir/$bin" ]] || qemu_die "$profile_dir/$bin is missing"
done

# ------------------------------------------------------------------------- the guest payload
scale="${NNACCEL_QEMU_TIMEOUT_SCALE:-4}"
per_test="${NNACCEL_QEMU_TEST_TIMEOUT:-900}"
payload="$target_dir/guest-run.sh"
logs="$target_dir/qemu-logs"
rm -rf "$logs"
mkdir -p "$logs"

{
    cat <<EOF
#!/bin/sh
# Written by scripts/qemu/suite.sh: the QEMU tier's tests, inside the guest (busybox sh).
export CI=true NNACCEL_TEST_TIMEOUT_SCALE=$scale RUST_BACKTRACE=1 TMPDIR=/tmp
LOGS=$logs
SIM=$profile_dir/nnaccel-sim
CTL=$profile_dir/nnaccelctl
PER_TEST=$per_test
EOF
    cat <<'EOF'
failed=0
passed=0

# run LABEL EXE [ENV=VALUE...]: one test binary, its output in $LOGS/LABEL.log; prints its
# closing "test result:" line (or why there is none) and, on failure, the failing tests.
run() {
    label=$1 exe=$2
    shift 2
    log="$LOGS/$label.log"
    start=$(cut -d' ' -f1 /proc/uptime)
    env "$@" timeout -s KILL "$PER_TEST" "$exe" >"$log" 2>&1
    rc=$?
    end=$(cut -d' ' -f1 /proc/uptime)
    result=$(grep '^test result:' "$log" | tail -n 1)
    [ -n "$result" ] || result="no test result (exit status $rc)"
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        echo "[guest] PASS $label: $result (wall ${start}s..${end}s uptime)"
    else
        failed=$((failed + 1))
        echo "[guest] FAIL $label: $result (exit status $rc)"
        grep -E '^test .* FAILED$|^---- |panicked at' "$log" | head -n 40
        echo "[guest] ---- last lines of $label.log"
        tail -n 40 "$log"
    fi
}

# The CUSE frontend chosen automatically for /dev/<name>: a character device with a
# major/minor, announced as "(cuse)", removed again on SIGTERM.
cuse_check() {
    node=/dev/nnaccel-tcheck
    log="$LOGS/cuse-check.log"
    ok=1
    "$SIM" --path "$node" >"$log" 2>&1 &
    pid=$!
    i=0
    while [ ! -c "$node" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    if [ -c "$node" ]; then
        major=$((0x$(stat -c %t "$node")))
        minor=$((0x$(stat -c %T "$node")))
        echo "[guest] cuse: $node is a $(stat -c %F "$node"), major $major minor $minor"
        [ "$major" -gt 0 ] || { echo "[guest] cuse: no major number"; ok=0; }
    else
        echo "[guest] cuse: $node did not appear as a character device"
        ok=0
    fi
    # The node appears when the kernel has taken CUSE_INIT's reply, which can be before the
    # simulator has logged that it serves: give the log line its own wait.
    i=0
    while ! grep -q "serving $node (cuse)" "$log" && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    if grep -q "serving $node (cuse)" "$log"; then
        echo "[guest] cuse: nnaccel-sim logged: $(grep -o "serving $node (cuse).*" "$log")"
    else
        echo "[guest] cuse: nnaccel-sim did not log 'serving $node (cuse)'"
        ok=0
    fi
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
    [ "$rc" = 0 ] || { echo "[guest] cuse: nnaccel-sim exited with $rc after SIGTERM"; ok=0; }
    [ ! -e "$node" ] || { echo "[guest] cuse: $node still exists after SIGTERM"; ok=0; }
    if [ "$ok" = 1 ]; then
        passed=$((passed + 1))
        echo "[guest] PASS cuse-check"
    else
        failed=$((failed + 1))
        echo "[guest] FAIL cuse-check; nnaccel-sim's log:"
        cat "$log"
    fi
}

# nnaccelctl info names the real dma-heap as the hardware_buffer_blob source.
info_check() {
    log="$LOGS/nnaccelctl-info.log"
    "$CTL" info --cpu >"$log" 2>&1
    line=$(grep '^hardware_buffer_blob:' "$log")
    echo "[guest] nnaccelctl info: $line"
    case "$line" in
        "hardware_buffer_blob: dma-heap:"*) passed=$((passed + 1)); echo "[guest] PASS nnaccelctl-info" ;;
        *) failed=$((failed + 1)); echo "[guest] FAIL nnaccelctl-info"; cat "$log" ;;
    esac
}

echo "[guest] kernel $(uname -r), $(nproc) CPUs, $(grep MemTotal /proc/meminfo)"
for f in /dev/cuse /dev/fuse /dev/udmabuf /dev/dma_heap/system; do
    [ -e "$f" ] && echo "[guest] have $f" || echo "[guest] MISSING $f"
done
cuse_check
info_check
EOF
    # Unit tests: everything of uapi, cpu, kmod-sim and the driver crates except the two that
    # compile C (c_header, linux_headers: the guest has no cc).
    while read -r pkg kind name exe; do
        case "$pkg" in uapi | cpu | kmod-sim | driver/*) ;; *) continue ;; esac
        case "$pkg/$kind/$name" in uapi/test/c_header | uapi/test/linux_headers) continue ;; esac
        printf 'run %q %q\n' "${pkg//\//-}-$kind-$name" "$exe"
    done <"$list"
    # Integration tests: the harness and the lifetime tests on both frontends, then the
    # real-kernel features (on CUSE).
    for frontend in fuse cuse; do
        for name in ioctl_harness lifetime; do
            exe="$(awk -v n="$name" '$1 == "tests" && $2 == "test" && $3 == n { print $4 }' "$list")"
            [[ -n "$exe" ]] || qemu_die "no test binary $name in $list"
            printf 'run %q %q NNACCEL_TEST_FRONTEND=%s\n' "$name-$frontend" "$exe" "$frontend"
        done
    done
    exe="$(awk '$1 == "tests" && $2 == "test" && $3 == "qemu_kernel" { print $4 }' "$list")"
    [[ -n "$exe" ]] || qemu_die "no test binary qemu_kernel in $list"
    printf 'run %q %q NNACCEL_TEST_FRONTEND=cuse NNACCEL_REQUIRE_KERNEL_FEATURES=1\n' \
        qemu_kernel-cuse "$exe"
    # The service end to end (nnaccel-sim on CUSE, nnaccel-hald, clients), its pools real
    # dma-bufs from the guest's dma-heap.
    exe="$(awk '$1 == "tests" && $2 == "test" && $3 == "service" { print $4 }' "$list")"
    [[ -n "$exe" ]] || qemu_die "no test binary service in $list"
    printf 'run %q %q NNACCEL_TEST_FRONTEND=cuse NNACCEL_REQUIRE_KERNEL_FEATURES=1 NNACCEL_HALD_BIN=%q\n' \
        service-cuse "$exe" "$profile_dir/nnaccel-hald"
    # Memory domains (tests/domains.rs) on CUSE: copyFrom/copyTo with hardware_buffer_blob
    # pools from the guest's dma-heap and udmabuf.
    exe="$(awk '$1 == "tests" && $2 == "test" && $3 == "domains" { print $4 }' "$list")"
    [[ -n "$exe" ]] || qemu_die "no test binary domains in $list"
    printf 'run %q %q NNACCEL_TEST_FRONTEND=cuse NNACCEL_REQUIRE_KERNEL_FEATURES=1 NNACCEL_HALD_BIN=%q\n' \
        domains-cuse "$exe" "$profile_dir/nnaccel-hald"
    # Bursts over FMQs (nnaccel-hald's workers wait with io_uring FutexWait on the guest's
    # kernel: NNACCEL_REQUIRE_KERNEL_FEATURES=1 makes the test insist on it), and the
    # two-process FMQ stress test.
    for name in burst fmq; do
        exe="$(awk -v n="$name" '$1 == "tests" && $2 == "test" && $3 == n { print $4 }' "$list")"
        [[ -n "$exe" ]] || qemu_die "no test binary $name in $list"
        printf 'run %q %q NNACCEL_TEST_FRONTEND=cuse NNACCEL_REQUIRE_KERNEL_FEATURES=1 NNACCEL_HALD_BIN=%q\n' \
            "$name-cuse" "$exe" "$profile_dir/nnaccel-hald"
    done
    # Compilation caching end to end (nnaccel-sim on CUSE, nnaccel-hald, nnaccelctl).
    exe="$(awk '$1 == "tests" && $2 == "test" && $3 == "cache" { print $4 }' "$list")"
    [[ -n "$exe" ]] || qemu_die "no test binary cache in $list"
    printf 'run %q %q NNACCEL_TEST_FRONTEND=cuse NNACCEL_HALD_BIN=%q NNACCEL_CTL_BIN=%q\n' \
        cache-cuse "$exe" "$profile_dir/nnaccel-hald" "$profile_dir/nnaccelctl"
    cat <<'EOF'
echo "[guest] $passed passed, $failed failed"
[ "$failed" = 0 ]
EOF
} >"$payload.tmp"
chmod 755 "$payload.tmp"
mv "$payload.tmp" "$payload"

# ------------------------------------------------------------------------- boot and run
export QEMU_TIMEOUT="${QEMU_TIMEOUT:-2700}"
set +e
"$SCRIPT_DIR/run.sh" --kernel "$kernel" --initramfs "$initramfs" --src "$REPO" "$target_dir" 2>&1 \
    | tee "$target_dir/qemu-run.log"
rc="${PIPESTATUS[0]}"
set -e

echo
echo "== QEMU suite"
grep -h '^\[guest\] \(PASS\|FAIL\|cuse:\|nnaccelctl info:\)\|^\[guest\] [0-9]* passed' "$target_dir/serial.log" || true
grep -h '^\[qemu\] .*\(boot time\|never started\)' "$target_dir/qemu-run.log" || true
qemu_log "QEMU suite: exit status $rc in $(($(now) - t_suite)) s (logs: $logs, serial: $target_dir/serial.log)"
exit "$rc"
