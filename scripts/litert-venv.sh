#!/usr/bin/env bash
# Makes (idempotently) the Python venv with LiteRT that the model bench and the LiteRT
# agreement test use (tests/benches/models.rs, tests/litert.rs), and prints its python's path
# on stdout (the only thing printed there; progress and errors go to stderr).
#
#   scripts/litert-venv.sh            # -> /path/to/target/litert-venv/bin/python
#
# NNACCEL_LITERT_VENV overrides the venv's directory (default: target/litert-venv in the
# repository). The versions are pinned; a venv whose stamp names other pins is rebuilt.
# Exits non-zero, saying why on stderr, when the venv cannot be made (no python3 with venv,
# PyPI unreachable).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${NNACCEL_LITERT_VENV:-$root/target/litert-venv}"
# numpy is pinned too: gen.py draws the weights with numpy's random generator, so the pin keeps
# the generated models identical from machine to machine.
pins=(ai-edge-litert==2.3.0 numpy==2.2.6)
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

python=$(command -v python3 || true)
if [ -z "$python" ]; then
    echo "litert-venv.sh: python3 not found (scripts/setup.sh installs it)" >&2
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
