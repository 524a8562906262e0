#!/usr/bin/env bash
# Makes (idempotently) a Python venv with a TFLite runtime, and prints its python's path on
# stdout (the only thing printed there; progress and errors go to stderr). Two flavours:
#
#   scripts/litert-venv.sh                  # -> /path/to/target/litert-venv/bin/python
#       ai-edge-litert 2.3.0 (TFLite 2.22): the model bench, the LiteRT agreement test
#       (tests/benches/models.rs, tests/litert.rs), the model generators and the delegate test;
#   scripts/litert-venv.sh tflite-runtime   # -> /path/to/target/tflite-runtime-venv/bin/python
#       tflite-runtime 2.14.0, the older interpreter the external delegate also serves
#       (tests/tflite_delegate.rs runs its Python test in both).
#
# NNACCEL_LITERT_VENV / NNACCEL_TFLITE_RUNTIME_VENV override the venvs' directories. The
# versions are pinned; a venv whose stamp names other pins is rebuilt. Exits non-zero, saying
# why on stderr, when the venv cannot be made (no suitable python3 with venv, PyPI unreachable).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
flavour="${1:-litert}"
case "$flavour" in
litert)
    venv="${NNACCEL_LITERT_VENV:-$root/target/litert-venv}"
    # numpy is pinned too: gen.py draws the weights with numpy's random generator, so the pin
    # keeps the generated models identical from machine to machine.
    pins=(ai-edge-litert==2.3.0 numpy==2.2.6)
    # Any python3 with a wheel for it.
    candidates=(python3)
    ;;
tflite-runtime)
    venv="${NNACCEL_TFLITE_RUNTIME_VENV:-$root/target/tflite-runtime-venv}"
    # tflite-runtime 2.14.0 has wheels for CPython 3.8 to 3.11 only (Debian 12's python3 is
    # 3.11), and was built against numpy 1.x: numpy 2 cannot load it.
    pins=(tflite-runtime==2.14.0 numpy==1.26.4)
    candidates=(python3.11 python3.10 python3.9 python3)
    ;;
*)
    echo "litert-venv.sh: unknown flavour '$flavour' (litert or tflite-runtime)" >&2
    exit 2
    ;;
esac
stamp="$venv/.nnaccel-pins"
want="${pins[*]}"

mkdir -p "$(dirname "$venv")"
# One maker at a time (the test and the bench may start together).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$venv.lock"
    flock 9
fi

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$venv/bin/python"
    exit 0
fi

python=""
for c in "${candidates[@]}"; do
    p=$(command -v "$c" || true)
    [ -n "$p" ] || continue
    if [ "$flavour" = tflite-runtime ] &&
        ! "$p" -c 'import sys; sys.exit(not (3, 8) <= sys.version_info[:2] <= (3, 11))' 2>/dev/null; then
        continue
    fi
    python=$p
    break
done
if [ -z "$python" ]; then
    echo "litert-venv.sh: no python for $flavour among ${candidates[*]} (tflite-runtime 2.14" \
        "needs CPython 3.8-3.11; scripts/setup.sh installs Debian 12's python3.11)" >&2
    exit 1
fi
rm -rf "$venv"
if ! "$python" -m venv "$venv" >&2; then
    echo "litert-venv.sh: '$python -m venv' failed (on Debian: apt-get install python3-venv;" \
        "scripts/setup.sh does it)" >&2
    rm -rf "$venv"
    exit 1
fi
echo "litert-venv.sh: installing ${pins[*]} into $venv" >&2
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-input "${pins[@]}" >&2; then
    echo "litert-venv.sh: pip could not install ${pins[*]} (is PyPI reachable?)" >&2
    rm -rf "$venv"
    exit 1
fi
echo "$want" >"$stamp"
echo "$venv/bin/python"
