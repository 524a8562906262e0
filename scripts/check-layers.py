#!/usr/bin/env python3
"""The layering check of .ci/run (docs/architecture.md, "Layers").

Fails (exit 1) when
  1. a workspace crate depends on a crate its layer may not import (the table LAYERS below,
     read against `cargo metadata`), or
  2. the modules of one crate import each other in a circle.

For (2) every path a module names (`use crate::…`, `crate::a::b`, `super::…`, re-exports
followed through `pub use`) becomes an arrow between two modules; an arrow from inside one
sibling subtree into another is lifted to the two siblings, so `ops::conv -> exec` together with
`exec -> ops` is a circle between `ops` and `exec`. A module and its own ancestors never count
as a circle (a parent declares its children; children use their parent's items).

Usage: scripts/check-layers.py [--verbose]      (from anywhere in the repository)
       scripts/check-layers.py --self-test    (the checker finds a circle and an upward arrow)
"""

import json
import os
import re
import subprocess
import sys

# Which workspace crates each crate may depend on. `deps` bounds [dependencies] (and build
# dependencies); `dev` adds what its tests may link besides.
LAYERS = {
    "nnaccel-uapi": {"deps": set(), "dev": set()},
    "nnaccel-cpu": {"deps": set(), "dev": set()},
    "nnaccel-kmod-sim": {"deps": {"nnaccel-uapi", "nnaccel-cpu"}, "dev": set()},
    "nnaccel-hal": {"deps": {"nnaccel-uapi", "nnaccel-cpu"}, "dev": {"nnaccel-kmod-sim"}},
    "nnaccel-protocol": {
        "deps": {"nnaccel-hal", "nnaccel-uapi", "nnaccel-cpu"},
        "dev": {"nnaccel-kmod-sim"},
    },
    "nnaccel-service": {
        "deps": {"nnaccel-hal", "nnaccel-protocol", "nnaccel-uapi", "nnaccel-cpu"},
        "dev": {"nnaccel-kmod-sim"},
    },
    # TFLite import: the graph form, the reader and the lowering, on the client library.
    "nnaccel-tflite": {
        "deps": {"nnaccel-hal", "nnaccel-protocol", "nnaccel-uapi", "nnaccel-cpu"},
        "dev": {"nnaccel-kmod-sim"},
    },
    # The external delegate (a cdylib LiteRT loads): the import's lowering, the client library,
    # and the embedded default (the simulated device in the interpreter's process).
    "nnaccel-tflite-delegate": {
        "deps": {"nnaccel-tflite", "nnaccel-hal", "nnaccel-protocol", "nnaccel-uapi", "nnaccel-cpu",
                 "nnaccel-kmod-sim"},
        "dev": set(),
    },
    # The embedded default links the simulated device into the CLI (an optional dependency).
    "nnaccelctl": {
        "deps": {"nnaccel-hal", "nnaccel-protocol", "nnaccel-uapi", "nnaccel-cpu", "nnaccel-kmod-sim",
                 "nnaccel-tflite"},
        "dev": set(),
    },
    # Cross-crate integration tests link everything.
    "nnaccel-tests": {"deps": None, "dev": None},
}

VERBOSE = "--verbose" in sys.argv


QUIET = False


def fail(msg):
    if not QUIET:
        print(f"check-layers: {msg}", file=sys.stderr)


def metadata(repo):
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
        cwd=repo, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)


def check_crate_arrows(meta):
    errors = 0
    names = {p["name"] for p in meta["packages"]}
    for p in meta["packages"]:
        rule = LAYERS.get(p["name"])
        if rule is None:
            fail(f"{p['name']}: not in the layer table of scripts/check-layers.py; add it")
            errors += 1
            continue
        for d in p["dependencies"]:
            if d["name"] not in names or d["name"] == p["name"]:
                continue
            dev = d.get("kind") == "dev"
            allowed = rule["deps"]
            if allowed is None:
                continue
            if dev:
                allowed = allowed | rule["dev"]
            if d["name"] not in allowed:
                kind = "dev-dependency" if dev else "dependency"
                fail(f"{p['name']} has a {kind} on {d['name']}, a layer it may not import")
                errors += 1
    return errors


# ---------------------------------------------------------------------------------------------
# Module graph of one crate

COMMENT = re.compile(r"//[^\n]*")
BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
STRING = re.compile(r'r#*"(?:.|\n)*?"#*|"(?:\\.|[^"\\])*"')
CHAR = re.compile(r"'(?:\\.|[^'\\])'")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
INLINE_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*\{", re.M)
ITEM = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?(?:const\s+)?(?:async\s+)?"
    r"(?:struct|enum|fn|trait|type|const|static|union|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)
PATH_AT = re.compile(r"\b(crate|super|self)\s*::")


def strip(src):
    src = BLOCK_COMMENT.sub(" ", src)
    src = STRING.sub('""', src)
    src = CHAR.sub("' '", src)
    return COMMENT.sub("", src)


def parse_tree(text, i):
    """Parses a path tree at text[i:] (after `crate::`): returns (list of paths, end index)."""
    paths = []
    segs = []
    n = len(text)
    while i < n:
        m = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\{|\*)").match(text, i)
        if not m:
            break
        tok = m.group(1)
        i = m.end()
        if tok == "{":
            while True:
                sub, i = parse_tree(text, i)
                paths += [segs + s for s in sub]
                m = re.compile(r"\s*([,}])").match(text, i)
                if not m:
                    return paths or [segs], i
                i = m.end()
                if m.group(1) == "}":
                    return paths, i
                if re.compile(r"\s*\}").match(text, i):
                    i = re.compile(r"\s*\}").match(text, i).end()
                    return paths, i
        if tok == "*":
            segs.append("*")
            break
        segs.append(tok)
        m = re.compile(r"\s*::").match(text, i)
        if not m:
            break
        i = m.end()
    paths.append(segs)
    return paths, i


class Crate:
    def __init__(self, name, root_file):
        self.name = name
        self.files = {}  # module path tuple -> file
        self.src = {}  # module path tuple -> stripped source
        self.discover((), root_file)

    def discover(self, path, file):
        if not os.path.isfile(file):
            return
        self.files[path] = file
        with open(file, encoding="utf-8") as f:
            text = strip(f.read())
        self.src[path] = text
        base = os.path.dirname(file)
        stem = os.path.splitext(os.path.basename(file))[0]
        own_dir = base if stem in ("lib", "main", "mod") or path == () else os.path.join(base, stem)
        for m in MOD_DECL.finditer(text):
            name = m.group(1)
            # A `#[path = "…"]` attribute right before the declaration.
            before = text[max(0, m.start() - 200):m.start()]
            pm = re.search(r'#\[path\s*=\s*""\]\s*$', before)
            candidates = [os.path.join(own_dir, name + ".rs"), os.path.join(own_dir, name, "mod.rs")]
            if pm:
                continue
            for c in candidates:
                if os.path.isfile(c):
                    self.discover(path + (name,), c)
                    break

    def items(self, mod):
        return {m.group(1) for m in ITEM.finditer(self.src.get(mod, ""))}

    def reexports(self, mod):
        """name -> absolute path, for `pub use` items of `mod`; and the glob targets."""
        names, globs = {}, []
        text = self.src.get(mod, "")
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+", text):
            start = m.end()
            head = re.compile(r"(crate|super|self)\s*::").match(text, start)
            if head:
                kind = head.group(1)
                trees, _ = parse_tree(text, head.end())
                base = self.anchor(mod, kind)
            else:
                trees, _ = parse_tree(text, start)
                base = mod  # a path relative to this module (`pub use types::*`)
            for t in trees:
                full = self.absolute(base, t)
                if full is None:
                    continue
                if full and full[-1] == "*":
                    globs.append(tuple(full[:-1]))
                elif full:
                    alias = re.compile(r"\s+as\s+([A-Za-z_]\w*)")
                    names[full[-1]] = tuple(full)
        return names, globs

    def anchor(self, mod, kind):
        if kind == "crate":
            return ()
        if kind == "self":
            return mod
        return mod[:-1] if mod else ()

    def absolute(self, base, segs):
        out = list(base)
        for s in segs:
            if s == "super":
                if out:
                    out.pop()
            elif s == "self":
                continue
            else:
                out.append(s)
        return out

    def resolve(self, path, depth=0):
        """The module that defines what `path` names (the deepest module on it, re-exports
        followed)."""
        mod = ()
        i = 0
        while i < len(path) and tuple(path[: i + 1]) in self.files:
            mod = tuple(path[: i + 1])
            i += 1
        if i >= len(path) or depth > 8:
            return mod
        name = path[i]
        if name in self.items(mod) or name == "*":
            return mod
        names, globs = self.reexports(mod)
        if name in names:
            return self.resolve(list(names[name]) + list(path[i + 1:]), depth + 1)
        for g in globs:
            target = self.resolve(list(g), depth + 1)
            if name in self.items(target):
                return target
            n2, _ = self.reexports(target)
            if name in n2:
                return self.resolve(list(n2[name]), depth + 1)
        return mod

    def arrows(self):
        out = set()
        for mod, text in self.src.items():
            for m in PATH_AT.finditer(text):
                kind = m.group(1)
                # `pub(super)`, `pub(crate)` and `pub(self)` are visibilities, not paths.
                trees, _ = parse_tree(text, m.end())
                base = self.anchor(mod, kind)
                for t in trees:
                    full = self.absolute(base, t)
                    if full is None:
                        continue
                    target = self.resolve(full)
                    if target != mod:
                        out.add((mod, target))
            # Plain `use name::…` of a child module (`use conv::x`) stays inside the module.
        return out


def lift(a, b):
    """The two siblings under the lowest common ancestor of a and b; None when one contains
    the other."""
    k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        k += 1
    if k == len(a) or k == len(b):
        return None
    return a[: k + 1], b[: k + 1]


def circles(edges):
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def show(mod):
    return "::".join(mod) if mod else "(root)"


def check_module_circles(meta):
    errors = 0
    for p in meta["packages"]:
        for t in p["targets"]:
            if not ({"lib", "bin"} & set(t["kind"])):
                continue
            crate = Crate(p["name"], t["src_path"])
            raw = crate.arrows()
            lifted = {}
            for a, b in raw:
                pair = lift(a, b)
                if pair:
                    lifted.setdefault(pair, []).append((a, b))
            if VERBOSE:
                for (a, b), why in sorted(lifted.items()):
                    print(f"{p['name']} {t['name']}: {show(a)} -> {show(b)}")
            for comp in circles(lifted.keys()):
                errors += 1
                members = sorted(comp)
                fail(f"{p['name']} ({t['name']}): modules import each other in a circle: "
                     + ", ".join(show(m) for m in members))
                for (a, b), why in sorted(lifted.items()):
                    if a in comp and b in comp:
                        ex = ", ".join(f"{show(x)} -> {show(y)}" for x, y in sorted(why)[:3])
                        fail(f"    {show(a)} -> {show(b)}   ({ex})")
    return errors


def self_test():
    """The checker's own test: a crate whose modules form a circle through a child module and
    a re-export, a crate that imports a layer above it, and a clean crate."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        def write(rel, text):
            path = os.path.join(d, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        write("bad/src/lib.rs", "pub mod exec;\npub mod ops;\npub use exec::ExecError;\n")
        write("bad/src/exec.rs", "pub struct ExecError;\nuse crate::ops::run;\n")
        write("bad/src/ops/mod.rs", "mod conv;\npub fn run() {}\n")
        write("bad/src/ops/conv.rs", "use crate::ExecError; // via the re-export\n")
        write("good/src/lib.rs", "pub mod a;\npub mod b;\n")
        write("good/src/a.rs", "pub struct A;\n")
        write("good/src/b/mod.rs", "mod c;\nuse crate::a::A;\npub struct B;\n")
        write("good/src/b/c.rs", "use super::B;\nuse crate::a::A;\n")
        edges = lambda root: {p for p in (lift(a, b) for a, b in Crate("x", root).arrows()) if p}
        bad = circles(edges(os.path.join(d, "bad/src/lib.rs")))
        assert [sorted(c) for c in bad] == [[("exec",), ("ops",)]], bad
        assert circles(edges(os.path.join(d, "good/src/lib.rs"))) == []
        meta = {"packages": [
            {"name": "nnaccel-hal", "targets": [], "dependencies": [
                {"name": "nnaccel-protocol", "kind": None}]},
            {"name": "nnaccel-protocol", "targets": [], "dependencies": [
                {"name": "nnaccel-hal", "kind": None}]},
        ]}
        global QUIET
        QUIET = True
        assert check_crate_arrows(meta) == 1
        QUIET = False
    print("check-layers: self-test passed")
    return 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    repo = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    ).stdout.strip() or os.getcwd()
    meta = metadata(repo)
    errors = check_crate_arrows(meta) + check_module_circles(meta)
    if errors:
        fail(f"{errors} layering error(s)")
        return 1
    crates = len(meta["packages"])
    print(f"check-layers: {crates} crates, arrows point down the layers, no module circles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
