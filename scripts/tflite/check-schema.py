#!/usr/bin/env python3
"""Checks that the vendored TFLite schema (driver/tflite/schema/schema.fbs) numbers what the
reader depends on as the ai-edge-litert wheel does: every enum's values (BuiltinOperator,
TensorType, ActivationFunctionType, Padding, ...) and every union's member order
(BuiltinOptions, BuiltinOptions2, ...) against the wheel's `schema_py_generated.py`.

    check-schema.py [PATH/TO/schema_py_generated.py]

Default module: the one in target/litert-venv (scripts/litert-venv.sh). A name both define must
have the same number; the wheel may define more, but only after the vendored schema's last
value (a newer schema appends, it never renumbers): those are listed, not failed. Exit status 1
on any disagreement.
"""

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = os.path.join(ROOT, "driver", "tflite", "schema", "schema.fbs")


def parse_fbs(text):
    """{name: {member: value}} for every enum and union (unions numbered from 1, NONE = 0)."""
    text = re.sub(r"//[^\n]*", "", text)
    out = {}
    for kind, name, body in re.findall(r"\b(enum|union)\s+(\w+)\s*(?::\s*\w+)?\s*\{([^}]*)\}", text):
        members = {}
        value = 0 if kind == "enum" else 1
        for item in body.split(","):
            item = re.sub(r"\([^)]*\)", "", item).strip()
            if not item:
                continue
            m = re.fullmatch(r"(\w+)\s*(?:=\s*(-?\w+))?", item)
            if not m:
                raise SystemExit(f"cannot parse {kind} {name} member {item!r}")
            if m.group(2) is not None:
                value = int(m.group(2), 0)
            members[m.group(1)] = value
            value += 1
        if kind == "union":
            members["NONE"] = 0
        out[name] = members
    return out


def parse_module(path):
    """{class: {member: value}} for the module's constant-only classes (its enums and unions),
    read as text so that no flatbuffers package is needed."""
    with open(path) as f:
        text = f.read()
    out = {}
    for name, body in re.findall(r"^class (\w+)\(object\):\n((?:    \w+ = -?\d+\n)+)", text, re.M):
        out[name] = {k: int(v) for k, v in re.findall(r"^    (\w+) = (-?\d+)$", body, re.M)}
    return out


def main():
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        found = glob.glob(os.path.join(ROOT, "target", "litert-venv", "lib", "python3*",
                                       "site-packages", "ai_edge_litert", "schema_py_generated.py"))
        if not found:
            raise SystemExit("no target/litert-venv: run scripts/litert-venv.sh or pass the module")
        path = found[0]
    module = parse_module(path)
    with open(SCHEMA) as f:
        fbs = parse_fbs(f.read())
    errors = []
    checked = 0
    for name, members in sorted(fbs.items()):
        wheel = module.get(name)
        if wheel is None:
            errors.append(f"{name}: not in the wheel's module")
            continue
        last = max(members.values())
        for member, value in members.items():
            if wheel.get(member) != value:
                errors.append(f"{name}.{member}: schema.fbs {value}, wheel {wheel.get(member)}")
            checked += 1
        for member, value in sorted(wheel.items(), key=lambda kv: kv[1]):
            if member not in members:
                if value <= last:
                    errors.append(f"{name}.{member} = {value}: in the wheel only, inside the vendored range")
                else:
                    print(f"newer in the wheel: {name}.{member} = {value}")
    for e in errors:
        print("MISMATCH", e)
    print(f"{checked} enum and union members of {len(fbs)} types checked against {path}: "
          f"{'FAILED' if errors else 'agree'}")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
