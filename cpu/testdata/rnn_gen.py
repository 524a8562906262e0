"""Expected values for cpu/src/ops/rnn_tests.rs: plain-Python RNN, SVDF and sequence RNNs
written from the NNAPI definitions (no dependency). Run: python3 cpu/testdata/rnn_gen.py
"""

ACT = {0: lambda v: v, 1: lambda v: max(0.0, v), 2: lambda v: min(1.0, max(-1.0, v)),
       3: lambda v: min(6.0, max(0.0, v))}


def step(x, w, r, bias, h, act, aux=None, aux_w=None):
    out = []
    for b in range(len(x)):
        row = []
        for o in range(len(w)):
            acc = bias[o] + sum(a * c for a, c in zip(x[b], w[o]))
            if aux is not None and aux_w is not None:
                acc += sum(a * c for a, c in zip(aux[b], aux_w[o]))
            acc += sum(a * c for a, c in zip(h[b], r[o]))
            row.append(ACT[act](acc))
        out.append(row)
    return out


def flat(m):
    return [v for r in m for v in (flat(r) if isinstance(r, list) else [r])]


def show(name, v):
    print(f"{name}: [{', '.join(repr(round(x, 6)) for x in flat(v))}]")


X = [[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]]
W = [[0.1, 0.2, 0.3], [-0.4, 0.5, -0.6]]
R = [[0.5, -0.5], [0.25, 1.0]]
BIAS = [0.1, -0.2]
H = [[1.0, -1.0], [0.5, 2.0]]
show("rnn none", step(X, W, R, BIAS, H, 0))
show("rnn relu", step(X, W, R, BIAS, H, 1))


def svdf(x, wf, wt, bias, state, rank, act):
    filters, mem = len(wf), len(wt[0])
    units = filters // rank
    out, new_state = [], []
    for b in range(len(x)):
        s = [state[b][f * mem:(f + 1) * mem] for f in range(filters)]
        scratch = []
        for f in range(filters):
            s[f][mem - 1] = sum(a * c for a, c in zip(wf[f], x[b]))
            scratch.append(sum(a * c for a, c in zip(wt[f], s[f])))
        out.append([ACT[act]((bias[u] if bias else 0.0) + sum(scratch[u * rank:(u + 1) * rank]))
                    for u in range(units)])
        new_state.append([v for f in range(filters) for v in s[f][1:] + [0.0]])
    return new_state, out


SX = [[1.0, -2.0], [0.5, 3.0]]
SWF = [[0.1, 0.2], [-0.3, 0.4], [0.5, -0.6], [0.7, 0.8]]
SWT = [[1.0, 0.5, -1.0], [0.25, -0.5, 2.0], [-1.5, 1.0, 0.5], [0.75, 0.25, 1.0]]
SB = [0.1, -0.1]
SS = [[0.1 * (i + 1) * (1 if i % 2 else -1) for i in range(12)],
      [0.05 * i for i in range(12)]]
st, o = svdf(SX, SWF, SWT, SB, SS, 2, 0)
show("svdf state", st)
show("svdf out", o)
st, o = svdf(SX, SWF, SWT, None, SS, 2, 1)
show("svdf nobias relu state", st)
show("svdf nobias relu out", o)
st2, o2 = svdf([[2.0, 1.0], [-1.0, -1.0]], SWF, SWT, SB, st, 2, 1)
show("svdf second step state", st2)
show("svdf second step out", o2)

# Sequences: time 3, batch 2, input 2, units 2 (time-major x[t][b]).
QX = [[[1.0, 0.0], [0.5, -1.0]], [[-0.5, 2.0], [1.0, 1.0]], [[0.0, -1.0], [2.0, 0.5]]]
QW = [[0.5, -0.25], [0.75, 0.5]]
QR = [[0.1, 0.2], [-0.3, 0.4]]
QB = [0.05, -0.05]
QH = [[0.2, -0.1], [0.0, 0.3]]


def seq(x, w, r, bias, h, act, order, aux=None, aux_w=None):
    outs = {}
    for t in order:
        h = step(x[t], w, r, bias, h, act, aux[t] if aux else None, aux_w)
        outs[t] = h
    return [outs[t] for t in range(len(x))], h


o, h = seq(QX, QW, QR, QB, QH, 0, range(3))
show("uni time-major out", o)
show("uni final state", h)
show("uni batch-major out", [[o[t][b] for t in range(3)] for b in range(2)])
o6, _ = seq(QX, QW, QR, QB, QH, 3, range(3))
show("uni relu6 out", o6)

# Bidirectional: same input; backward cell of 1 unit.
BW = [[-0.5, 1.0]]
BR = [[0.5]]
BB = [0.1]
BH = [[0.3], [-0.2]]
fo, fh = seq(QX, QW, QR, QB, QH, 0, range(3))
bo, bh = seq(QX, BW, BR, BB, BH, 0, reversed(range(3)))
show("bi fw out", fo)
show("bi bw out", bo)
show("bi merged", [[fo[t][b] + bo[t][b] for b in range(2)] for t in range(3)])
show("bi fw state", fh)
show("bi bw state", bh)
show("bi bw out batch-major", [[bo[t][b] for t in range(3)] for b in range(2)])
# Parallel linking: the auxiliary input (1 feature) feeds the backward cell.
AX = [[[1.0], [-1.0]], [[0.5], [2.0]], [[-2.0], [0.25]]]
PBW = [[0.8]]
bo_p, _ = seq(AX, PBW, BR, BB, BH, 0, reversed(range(3)))
show("bi parallel bw out", bo_p)
# Cross linking: both cells add aux . aux_w.
FAW = [[0.5], [-1.0]]
BAW = [[2.0]]
fo_c, _ = seq(QX, QW, QR, QB, QH, 0, range(3), AX, FAW)
bo_c, _ = seq(QX, BW, BR, BB, BH, 0, reversed(range(3)), AX, BAW)
show("bi cross fw out", fo_c)
show("bi cross bw out", bo_c)
