#!/usr/bin/env python3
"""Expected values of the LSTM lowering tests (driver/tflite/src/lower/tests_lstm.rs), worked
with numpy in float64 from TFLite's description of its float LSTM cell (the FULL kernel):

    i = sigmoid(W_xi x + W_hi h + p_i * c + b_i)     (CIFG: i = 1 - f)
    f = sigmoid(W_xf x + W_hf h + p_f * c + b_f)
    g = act(W_xc x + W_hc h + b_c)
    c' = clip(f * c + i * g, cell_clip)
    o = sigmoid(W_xo x + W_ho h + p_o * c' + b_o)
    h' = clip(W_proj (o * act(c')) + b_proj, proj_clip)   (no projection: o * act(c'))

With layer normalization each gate's sum (without its bias) is normalized to zero mean and
unit variance (epsilon 1e-8), scaled by its coefficients, then the bias is added.

Every weight comes from `pattern(k, shape)`, an integer formula the Rust tests repeat:
value[i][j] = ((7k + 3i + 5j) mod 11 - 5) / 10, where k is the tensor's TFLite input index.

    python3 scripts/tflite/lstm_reference.py

prints each test's expected outputs.
"""

import numpy as np


def pattern(k, shape):
    out = np.zeros(shape)
    for idx in np.ndindex(*shape):
        i = idx[0]
        j = idx[1] if len(idx) > 1 else 0
        out[idx] = ((7 * k + 3 * i + 5 * j) % 11 - 5) / 10
    return out


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


ACT = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0.0), "tanh": np.tanh,
       "sigmoid": sigmoid}


def layer_norm(v, w):
    mean = v.mean()
    var = ((v - mean) ** 2).mean()
    return (v - mean) / np.sqrt(var + 1e-8) * w


class Cell:
    """The weights of one cell: n_input, n_cell, n_output; which optional parts it has. `base`
    offsets the TFLite input indexes the weights are patterned on (1 for the forward cell,
    18 for the bidirectional form's backward cell)."""

    def __init__(self, n_input, n_cell, n_output=None, cifg=False, peephole=False,
                 projection=False, layer_norm=False, base=1):
        n_output = n_cell if n_output is None else n_output
        self.cifg, self.peephole, self.projection = cifg, peephole, projection
        self.layer_norm = layer_norm
        k = lambda off: base + off  # noqa: E731
        self.wx = [None if (g == 0 and cifg) else pattern(k(g), (n_cell, n_input))
                   for g in range(4)]
        self.wh = [None if (g == 0 and cifg) else pattern(k(4 + g), (n_cell, n_output))
                   for g in range(4)]
        self.p = [None if (not peephole or (g == 0 and cifg)) else pattern(k(8 + g), (n_cell,))
                  for g in range(3)]
        self.b = [None if (g == 0 and cifg) else pattern(k(11 + g), (n_cell,))
                  for g in range(4)]
        self.proj_w = pattern(k(15), (n_output, n_cell)) if projection else None
        self.proj_b = pattern(k(16), (n_output,)) if projection else None
        # Layer-norm coefficients: TFLite inputs 20-23, shifted by 0.5 to keep them positive.
        self.ln = [None if (g == 0 and cifg) else pattern(20 + g, (n_cell,)) + 0.5
                   for g in range(4)] if layer_norm else None

    def step(self, x, h, c, act="tanh", cell_clip=0.0, proj_clip=0.0):
        def gate(g, peep_c):
            v = self.wx[g] @ x + self.wh[g] @ h
            if peep_c is not None and g < 3 and self.p[g] is not None:
                v = v + self.p[g] * peep_c
            elif peep_c is not None and g == 3 and self.peephole:
                v = v + self.p[2] * peep_c
            if self.ln is not None:
                return layer_norm(v, self.ln[g]) + self.b[g]
            return v + self.b[g]
        f = sigmoid(gate(1, c))
        i = 1.0 - f if self.cifg else sigmoid(gate(0, c))
        g = ACT[act](gate(2, None))
        c2 = f * c + i * g
        if cell_clip > 0:
            c2 = np.clip(c2, -cell_clip, cell_clip)
        o = sigmoid(gate(3, c2))
        m = o * ACT[act](c2)
        if self.projection:
            h2 = self.proj_w @ m + self.proj_b
            if proj_clip > 0:
                h2 = np.clip(h2, -proj_clip, proj_clip)
        else:
            h2 = m
        return h2, c2


def batch_step(cell, xs, hs, cs, **kw):
    out = [cell.step(x, h, c, **kw) for x, h, c in zip(xs, hs, cs)]
    return np.array([o[0] for o in out]), np.array([o[1] for o in out])


def sequence(cell, xs, h, c, reverse=False, **kw):
    """xs: [time, batch, input]; returns outputs [time, batch, output], final h, c."""
    steps = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    out = [None] * len(xs)
    for t in steps:
        h, c = batch_step(cell, xs[t], h, c, **kw)
        out[t] = h
    return np.array(out), h, c


def show(name, v):
    flat = ", ".join("%.7g" % x for x in np.asarray(v).ravel())
    print("%s: [%s]" % (name, flat))


def main():
    np.set_printoptions(precision=8)
    # lstm_step: input 3, cell 2, TANH, h0 and c0 non-zero; two steps.
    cell = Cell(3, 2)
    x = np.array([[0.5, -1.0, 2.0]])
    h0, c0 = np.array([[0.25, -0.5]]), np.array([[1.0, -1.0]])
    h1, c1 = batch_step(cell, x, h0, c0)
    show("lstm_step h1", h1)
    show("lstm_step c1", c1)
    h2, c2 = batch_step(cell, x, h1, c1)
    show("lstm_step h2", h2)
    show("lstm_step c2", c2)

    # lstm_cifg_peephole_projection: batch 2, input 2, cell 3, output 2, cell clip 0.5,
    # projection clip 0.38, RELU; h0 and c0 non-zero.
    cell = Cell(2, 3, 2, cifg=True, peephole=True, projection=True)
    x = np.array([[1.0, -0.5], [-2.0, 0.25]])
    h0 = np.array([[0.1, -0.2], [0.3, 0.0]])
    c0 = np.array([[0.2, -0.3, 0.4], [-0.1, 0.5, 0.0]])
    h, c = batch_step(cell, x, h0, c0, act="relu", cell_clip=0.5, proj_clip=0.38)
    show("cifg h", h)
    show("cifg c", c)

    # lstm_layer_norm: input 2, cell 3, peephole, TANH; c0 non-zero.
    cell = Cell(2, 3, layer_norm=True, peephole=True)
    x = np.array([[0.75, -1.5]])
    h, c = batch_step(cell, x, np.zeros((1, 3)), np.array([[0.5, -0.25, 1.0]]))
    show("layer_norm h", h)
    show("layer_norm c", c)

    # unidirectional: batch 2, time 3, input 2, cell 2, batch-major input, TANH.
    cell = Cell(2, 2)
    xs = np.array([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]],
                   [[0.5, 0.5], [2.0, -1.0], [0.0, 0.0]]])
    out, h, c = sequence(cell, xs.transpose(1, 0, 2), np.zeros((2, 2)), np.zeros((2, 2)))
    show("uni out (batch-major)", out.transpose(1, 0, 2))
    show("uni h", h)
    show("uni c", c)
    out2, _, _ = sequence(cell, xs.transpose(1, 0, 2), h, c)
    show("uni out run 2", out2.transpose(1, 0, 2))

    # bidirectional: time 2, batch 1, input 2, cells 2 (fw, base 1) and 2 (bw, base 18),
    # time-major, TANH.
    fw, bw = Cell(2, 2), Cell(2, 2, base=18)
    xs = np.array([[[1.0, -1.0]], [[0.5, 2.0]]])
    fo, fh, fc = sequence(fw, xs, np.zeros((1, 2)), np.zeros((1, 2)))
    bo, bh, bc = sequence(bw, xs, np.zeros((1, 2)), np.zeros((1, 2)), reverse=True)
    show("bi fw out", fo)
    show("bi bw out", bo)
    show("bi fw h", fh)
    show("bi fw c", fc)
    show("bi bw h", bh)
    show("bi bw c", bc)


if __name__ == "__main__":
    main()
