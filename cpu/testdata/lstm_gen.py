#!/usr/bin/env python3
"""Expected values for the float LSTM family tests (cpu/src/ops/lstm_tests.rs).

An independent numpy model of NNAPI's LSTM cell (CIFG, peephole, projection, clipping,
layer normalization, auxiliary input), written from the NNAPI operation definitions in
matrix form. Prints Rust `Case` constants; the tests embed the printed text verbatim.

Run: python3 cpu/testdata/lstm_gen.py > /tmp/cases.rs
"""
import numpy as np

RNG = np.random.default_rng(17)


def w(*shape):
    """Deterministic small weights, rounded to 2 decimals (exact in the printed literals)."""
    return np.round(RNG.uniform(-1.0, 1.0, size=shape), 2).astype(np.float32)


def act_fn(code, x):
    return {
        0: lambda v: v,
        1: lambda v: np.maximum(v, 0),
        2: lambda v: np.clip(v, -1, 1),
        3: lambda v: np.clip(v, 0, 6),
        4: np.tanh,
        6: lambda v: 1 / (1 + np.exp(-v)),
    }[code](x)


def sig(x):
    return 1 / (1 + np.exp(-x))


def layer_norm(z, g, b):
    mu = z.mean(axis=1, keepdims=True)
    var = z.var(axis=1, keepdims=True)
    return (z - mu) / np.sqrt(var + 1e-8) * g + b


def cell(p, x, h, c, act, cell_clip, proj_clip, aux=None):
    """One step for a batch. p: dict of weights by name (absent = None)."""
    x = x.astype(np.float64)
    ln = p.get("ln_f") is not None

    def pre(g):
        z = x @ p["wx" + g].T + h @ p["wh" + g].T
        if aux is not None and p.get("wa" + g) is not None:
            z = z + aux @ p["wa" + g].T
        if not ln:
            z = z + p["b" + g]
        return z

    cifg = p.get("wxi") is None
    zf = pre("f")
    if p.get("pf") is not None:
        zf = zf + p["pf"] * c
    if ln:
        zf = layer_norm(zf, p["ln_f"], p["bf"])
    f = sig(zf)
    if cifg:
        i = 1 - f
    else:
        zi = pre("i")
        if p.get("pi") is not None:
            zi = zi + p["pi"] * c
        if ln:
            zi = layer_norm(zi, p["ln_i"], p["bi"])
        i = sig(zi)
    zc = pre("c")
    if ln:
        zc = layer_norm(zc, p["ln_c"], p["bc"])
    c_new = f * c + i * act_fn(act, zc)
    if cell_clip > 0:
        c_new = np.clip(c_new, -cell_clip, cell_clip)
    zo = pre("o")
    if p.get("po") is not None:
        zo = zo + p["po"] * c_new
    if ln:
        zo = layer_norm(zo, p["ln_o"], p["bo"])
    o = sig(zo)
    m = o * act_fn(act, c_new)
    if p.get("pw") is not None:
        h_new = m @ p["pw"].T
        if p.get("pb") is not None:
            h_new = h_new + p["pb"]
        if proj_clip > 0:
            h_new = np.clip(h_new, -proj_clip, proj_clip)
    else:
        h_new = m
    return h_new, c_new


def params(n_in, n_cell, n_out, cifg=False, peephole=False, proj=False, proj_bias=False,
           ln=False, n_aux=0):
    p = {}
    for g in "ifco":
        if g == "i" and cifg:
            continue
        p["wx" + g] = w(n_cell, n_in)
        p["wh" + g] = w(n_cell, n_out)
        p["b" + g] = w(n_cell)
        if n_aux:
            p["wa" + g] = w(n_cell, n_aux)
        if ln:
            p["ln_" + g] = w(n_cell) + np.float32(1.0)
    if peephole:
        for g in ("i", "f", "o"):
            if g == "i" and cifg:
                continue
            p["p" + g] = w(n_cell)
    if proj:
        p["pw"] = w(n_out, n_cell)
        if proj_bias:
            p["pb"] = w(n_out)
    return p


# Operand offsets of one cell's tensors from its first weight (NNAPI order).
OFFS = {"wxi": 0, "wxf": 1, "wxc": 2, "wxo": 3, "whi": 4, "whf": 5, "whc": 6, "who": 7,
        "pi": 8, "pf": 9, "po": 10, "bi": 11, "bf": 12, "bc": 13, "bo": 14, "pw": 15, "pb": 16}
LN = {"ln_i": 0, "ln_f": 1, "ln_c": 2, "ln_o": 3}
AUX = {"wai": 0, "waf": 1, "wac": 2, "wao": 3}


def place(p, base, h_idx, c_idx, ln_base, aux_base, h0, c0):
    t = []
    for k, v in p.items():
        if k in OFFS:
            t.append((base + OFFS[k], v))
        elif k in LN:
            t.append((ln_base + LN[k], v))
        elif k in AUX:
            t.append((aux_base + AUX[k], v))
    t.append((h_idx, h0))
    t.append((c_idx, c0))
    return t


def lit(a):
    a = np.asarray(a, dtype=np.float64).ravel()
    return "&[" + ", ".join(
        np.format_float_positional(np.float32(v), unique=True, trim="0") for v in a) + "]"


def dims(a):
    return "&[" + ", ".join(str(d) for d in np.shape(a)) + "]"


def emit(name, n_inputs, tensors, act, cell_clip, proj_clip, flags, outputs):
    print(f"pub(super) const {name}: Case = Case {{")
    print(f"    n_inputs: {n_inputs},")
    print("    tensors: &[")
    for i, v in sorted(tensors, key=lambda e: e[0]):
        print(f"        ({i}, {dims(v)}, {lit(v)}),")
    print("    ],")
    print(f"    act: {act},")
    print(f"    cell_clip: {float(cell_clip)!r},")
    print(f"    proj_clip: {float(proj_clip)!r},")
    print("    flags: &[" + ", ".join(f"({i}, {str(b).lower()})" for i, b in flags) + "],")
    print("    outputs: &[")
    for o in outputs:
        # An all-NaN output (the LSTM scratch buffer) has unspecified contents: shape only.
        data = "&[]" if np.isnan(o).all() else lit(o)
        print(f"        ({dims(o)}, {data}),")
    print("    ],")
    print("};")
    print()


def lstm_case(name, n_batch, n_in, n_cell, n_out, act, cell_clip, proj_clip, n_inputs=23,
              **kw):
    p = params(n_in, n_cell, n_out, **kw)
    x = w(n_batch, n_in)
    h0 = w(n_batch, n_out) * np.float32(0.5)
    c0 = w(n_batch, n_cell)
    h, c = cell(p, x, h0, c0, act, cell_clip, proj_clip)
    gates = 3 if p.get("wxi") is None else 4
    scratch = np.full((n_batch, n_cell * gates), np.nan)
    t = [(0, x)] + place(p, 1, 18, 19, 23, None, h0, c0)
    emit(name, n_inputs, t, act, cell_clip, proj_clip, [], [scratch, h, c, h])


def seq_inputs(steps, n_batch, n_in):
    return w(steps, n_batch, n_in)


def unroll(p, xs, h0, c0, act, cc, pc, reverse=False, aux=None):
    steps = xs.shape[0]
    out = [None] * steps
    h, c = h0.astype(np.float64), c0.astype(np.float64)
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    for t in order:
        h, c = cell(p, xs[t], h, c, act, cc, pc, None if aux is None else aux[t])
        out[t] = h
    return np.stack(out), h, c


def uni_case(name, steps, n_batch, n_in, n_cell, n_out, act, cc, pc, time_major, states,
             **kw):
    p = params(n_in, n_cell, n_out, **kw)
    xs = seq_inputs(steps, n_batch, n_in)
    h0 = w(n_batch, n_out) * np.float32(0.5)
    c0 = w(n_batch, n_cell)
    out, h, c = unroll(p, xs, h0, c0, act, cc, pc)
    x_in = xs if time_major else xs.transpose(1, 0, 2)
    out = out if time_major else out.transpose(1, 0, 2)
    t = [(0, x_in)] + place(p, 1, 18, 19, 24, None, h0, c0)
    outs = [out, h, c] if states else [out]
    emit(name, 28, t, act, cc, pc, [(23, time_major)], outs)


def bi_case(name, steps, n_batch, n_in, n_cell, n_out, act, cc, pc, time_major, merge, states,
            aux_mode=None, n_aux=0, **kw):
    cross = aux_mode == "cross"
    parallel = aux_mode == "parallel"
    pf = params(n_in, n_cell, n_out, n_aux=n_aux if cross else 0, **kw)
    bw_in = n_aux if parallel else n_in
    pb = params(bw_in, n_cell, n_out, n_aux=n_aux if cross else 0, **kw)
    xs = seq_inputs(steps, n_batch, n_in)
    aux = seq_inputs(steps, n_batch, n_aux) if aux_mode else None
    fh0, fc0 = w(n_batch, n_out) * np.float32(0.5), w(n_batch, n_cell)
    bh0, bc0 = w(n_batch, n_out) * np.float32(0.5), w(n_batch, n_cell)
    fo, fh, fc = unroll(pf, xs, fh0, fc0, act, cc, pc, aux=aux if cross else None)
    bo, bh, bc = unroll(pb, aux if parallel else xs, bh0, bc0, act, cc, pc, reverse=True,
                        aux=aux if cross else None)
    tr = (lambda a: a) if time_major else (lambda a: a.transpose(1, 0, 2))
    t = [(0, tr(xs))]
    t += place(pf, 1, 35, 36, 53, 40, fh0, fc0)
    t += place(pb, 18, 37, 38, 57, 44, bh0, bc0)
    if aux is not None:
        t.append((39, tr(aux)))
    outs = [tr(np.concatenate([fo, bo], axis=2))] if merge else [tr(fo), tr(bo)]
    if states:
        outs += [fh, fc, bh, bc]
    emit(name, 61, t, act, cc, pc, [(51, merge), (52, time_major)], outs)


print("// Generated by cpu/testdata/lstm_gen.py; do not edit by hand.")
print()
lstm_case("LSTM_PLAIN", 2, 3, 4, 4, 4, 0.0, 0.0)
lstm_case("LSTM_CIFG_PEEPHOLE_PROJECTION", 2, 3, 4, 2, 4, 0.0, 0.0, cifg=True,
          peephole=True, proj=True, proj_bias=True)
lstm_case("LSTM_CLIPPED", 2, 3, 4, 2, 4, 0.3, 0.1, peephole=True, proj=True)
lstm_case("LSTM_RELU6_PROJECTION_NO_BIAS", 1, 2, 3, 2, 3, 0.0, 0.0, proj=True)
lstm_case("LSTM_SIGMOID", 1, 2, 3, 3, 6, 0.0, 0.0)
lstm_case("LSTM_LAYER_NORM", 2, 3, 4, 3, 4, 0.0, 0.0, n_inputs=27, peephole=True, proj=True,
          ln=True)
lstm_case("LSTM_LAYER_NORM_CIFG", 2, 3, 4, 4, 4, 0.0, 0.0, n_inputs=27, cifg=True, ln=True)
uni_case("UNI_TIME_MAJOR", 3, 2, 3, 4, 4, 4, 0.0, 0.0, True, True)
uni_case("UNI_BATCH_MAJOR_PROJECTION", 3, 2, 3, 4, 2, 4, 0.0, 0.0, False, True, peephole=True,
         proj=True, proj_bias=True)
uni_case("UNI_LAYER_NORM_CIFG", 2, 1, 2, 3, 3, 4, 0.5, 0.0, True, False, cifg=True, ln=True)
bi_case("BI_SEPARATE", 3, 2, 2, 3, 3, 4, 0.0, 0.0, True, False, True)
bi_case("BI_MERGED_BATCH_MAJOR", 3, 2, 2, 3, 2, 4, 0.0, 0.0, False, True, False, proj=True)
bi_case("BI_CROSS_LINKED_AUX", 2, 1, 2, 3, 3, 4, 0.0, 0.0, True, False, False,
        aux_mode="cross", n_aux=2)
bi_case("BI_PARALLEL_LINKED_AUX", 2, 1, 2, 3, 3, 4, 0.0, 0.0, True, True, True,
        aux_mode="parallel", n_aux=3, cifg=True)
bi_case("BI_LAYER_NORM_PEEPHOLE_CLIPPED", 2, 2, 2, 3, 3, 4, 0.2, 0.0, False, False, False,
        peephole=True, ln=True)
