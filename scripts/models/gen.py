#!/usr/bin/env python3
"""Builds the benchmark and agreement-test networks twice, with the same weights: as a
LiteRT `.tflite` file and as an nnaccel JSON model (docs/model-format.md), plus an inputs file.

    gen.py --out DIR [--json-only] NAME...      (NAME: see --list)

For each NAME it writes into DIR:

- NAME.json         the nnaccel model (CONSTANT_COPY values; per-channel int8 filters carry
                    `channelQuant`);
- NAME.inputs.json  the deterministic input (docs/model-format.md, "The inputs file");
- NAME.tflite       the same network for LiteRT, made with the flatbuffers schema module that
                    ships in the ai-edge-litert wheel (object API: ModelT, SubGraphT, ...);
                    left out with --json-only (a python without the wheel);
- NAME.meta.json    what the bench and the test read: MACs per run counted from the layer
                    shapes here (independently of the Rust side's count), input and output
                    shapes and quantization, and the hash of this script. Written last: a model
                    whose meta names this script's hash is up to date and is not rebuilt.

Everything comes from one seed. Weights are He-initialised (normal, std sqrt(2/fan_in); the
linear layers before a softmax or a residual sum use sqrt(1/fan_in)) and rounded to 3
significant decimal digits, so the JSON stays small (MobileNetV1: ~40 MB) and the value the
JSON text means and the float32 in the .tflite are the same number. The int8 networks are the
TFLite full-integer scheme over the same float weights: int8 activations (asymmetric, ranges
calibrated by a numpy float forward pass of the float network on the deterministic input),
per-channel symmetric int8 filters for CONV_2D / DEPTHWISE_CONV_2D, per-tensor symmetric int8
weights for FULLY_CONNECTED, int32 biases at scale input_scale * filter_scale[c]. AVERAGE_POOL_2D
and RESHAPE keep their input's quantization; SOFTMAX's int8 output is scale 1/256, zero point
-128 (as TFLite requires). The benchmark networks (full-size MobileNets, the MLP) end in
SOFTMAX (beta 1) as the real ones do; the small MobileNets of the agreement test end at the
logits (FULLY_CONNECTED): the same in both files.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

SEED = 20251125
RELU, RELU6 = 1, 3  # fused activation codes: the same numbers in NNAPI and TFLite
NNAPI_ACT = {None: 0, "relu": RELU, "relu6": RELU6}


def make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def round3(a):
    """float64 array -> float32 array of the values written with 3 significant digits, and
    the texts. The float32 is what `float(text)` rounds to, which is what the JSON reader
    does (f64, then f32)."""
    flat = np.asarray(a, dtype=np.float64).ravel()
    texts = ["%.3g" % x for x in flat.tolist()]
    values = np.array(texts, dtype=np.float64).astype(np.float32).reshape(np.shape(a))
    return values, texts


class Const:
    def __init__(self, values, texts):
        self.values = values  # float32 ndarray
        self.texts = texts


class Net:
    """A network as a list of layers over named activation tensors, with float weights."""

    def __init__(self, name, rng, input_shape):
        self.name = name
        self.rng = rng
        self.input_shape = list(input_shape)
        self.layers = []  # dicts: kind, x, (y), out, params
        self.shapes = {"input": list(input_shape)}
        self.count = 0

    def _new(self, shape):
        self.count += 1
        name = "t%d" % self.count
        self.shapes[name] = list(shape)
        return name

    def weight(self, shape, fan_in, gain=2.0):
        w = self.rng.standard_normal(shape) * np.sqrt(gain / fan_in)
        return Const(*round3(w))

    def bias(self, n):
        return Const(*round3(self.rng.standard_normal(n) * 0.05))

    @staticmethod
    def same_pads(size, k, s):
        out = -(-size // s)
        total = max((out - 1) * s + k - size, 0)
        return out, total // 2, total - total // 2

    def _window(self, x, k, s, cout):
        """The output tensor of a k×k window at stride s with SAME padding, and the pads
        (left, right, top, bottom)."""
        n, h, w, _ = self.shapes[x]
        oh, pt, pb = self.same_pads(h, k, s)
        ow, pl, pr = self.same_pads(w, k, s)
        return self._new([n, oh, ow, cout]), (pl, pr, pt, pb)

    def conv(self, x, cout, k, s, act, gain=2.0):
        cin = self.shapes[x][3]
        out, pads = self._window(x, k, s, cout)
        self.layers.append(dict(kind="conv", x=x, out=out, k=k, s=s, act=act, pads=pads,
                                w=self.weight([cout, k, k, cin], k * k * cin, gain),
                                b=self.bias(cout)))
        return out

    def dwconv(self, x, k, s, act):
        c = self.shapes[x][3]
        out, pads = self._window(x, k, s, c)
        self.layers.append(dict(kind="dwconv", x=x, out=out, k=k, s=s, act=act, pads=pads,
                                w=self.weight([1, k, k, c], k * k), b=self.bias(c)))
        return out

    def add(self, a, b):
        out = self._new(self.shapes[a])
        self.layers.append(dict(kind="add", x=a, y=b, out=out))
        return out

    def avgpool_all(self, x):
        n, h, w, c = self.shapes[x]
        out = self._new([n, 1, 1, c])
        self.layers.append(dict(kind="avgpool", x=x, out=out, kh=h, kw=w))
        return out

    def reshape(self, x, shape):
        out = self._new(shape)
        self.layers.append(dict(kind="reshape", x=x, out=out, shape=list(shape)))
        return out

    def fc(self, x, units, act, gain=2.0):
        n, cin = self.shapes[x]
        out = self._new([n, units])
        self.layers.append(dict(kind="fc", x=x, out=out, act=act,
                                w=self.weight([units, cin], cin, gain), b=self.bias(units)))
        return out

    def finish(self, x, softmax):
        """Makes `x`, or its SOFTMAX, the output."""
        if softmax:
            out = self._new(self.shapes[x])
            self.layers.append(dict(kind="softmax", x=x, out=out))
            x = out
        self.output = x

    def macs(self):
        """Multiply-accumulates of one run: CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED
        (the rest is noise next to them and is not counted)."""
        total = 0
        for l in self.layers:
            out = int(np.prod(self.shapes[l["out"]]))
            if l["kind"] == "conv":
                _, k, _, cin = l["w"].values.shape
                total += out * k * k * cin
            elif l["kind"] == "dwconv":
                total += out * l["k"] * l["k"]
            elif l["kind"] == "fc":
                total += out * self.shapes[l["x"]][1]
        return total


# --- the networks ---------------------------------------------------------------------------


def mobilenet_v1(rng, name, alpha, res, softmax, classes=1000):
    net = Net(name, rng, [1, res, res, 3])
    x = net.conv("input", int(32 * alpha), 3, 2, "relu6")
    for c, s in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
                 (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]:
        x = net.dwconv(x, 3, s, "relu6")
        x = net.conv(x, int(c * alpha), 1, 1, "relu6")
    x = net.avgpool_all(x)
    x = net.reshape(x, [1, net.shapes[x][3]])
    x = net.fc(x, classes, None, gain=1.0)
    net.finish(x, softmax)
    return net


def mobilenet_v2(rng, name, alpha, res, softmax, classes=1000):
    net = Net(name, rng, [1, res, res, 3])
    x = net.conv("input", make_divisible(32 * alpha), 3, 2, "relu6")
    cin = net.shapes[x][3]
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        cout = make_divisible(c * alpha)
        for i in range(n):
            stride = s if i == 0 else 1
            y = x
            if t != 1:
                y = net.conv(y, cin * t, 1, 1, "relu6")
            y = net.dwconv(y, 3, stride, "relu6")
            # The linear bottleneck: no activation; a residual sum follows when shapes allow.
            y = net.conv(y, cout, 1, 1, None, gain=1.0)
            x = net.add(x, y) if stride == 1 and cin == cout else y
            cin = cout
    x = net.conv(x, 1280 if alpha <= 1.0 else make_divisible(1280 * alpha), 1, 1, "relu6")
    x = net.avgpool_all(x)
    x = net.reshape(x, [1, net.shapes[x][3]])
    x = net.fc(x, classes, None, gain=1.0)
    net.finish(x, softmax)
    return net


def mlp(rng, name, batch):
    net = Net(name, rng, [batch, 784])
    x = net.fc("input", 1024, "relu")
    x = net.fc(x, 1024, "relu")
    x = net.fc(x, 10, None, gain=1.0)
    net.finish(x, True)
    return net


# name -> (builder, dtype). Each network family draws its weights from its own generator
# (seeded from SEED and the family), so a family's float32 and int8 files share weights and
# the MLP's batch 1 and 64 too.
def _v1(alpha, res, softmax=True):
    return lambda rng, name: mobilenet_v1(rng, name, alpha, res, softmax)


def _v2(alpha, res, softmax=True):
    return lambda rng, name: mobilenet_v2(rng, name, alpha, res, softmax)


def _mlp(batch):
    return lambda rng, name: mlp(rng, name, batch)


NETWORKS = {
    "mobilenet_v1": (1, _v1(1.0, 224)),
    "mobilenet_v2": (2, _v2(1.0, 224)),
    # The test's variants end at the logits: through a 1000-way softmax of random weights
    # nearly every int8 output would be the same -128, and agreement there would say little.
    "mobilenet_v1_small": (3, _v1(0.25, 96, softmax=False)),
    "mobilenet_v2_small": (4, _v2(0.35, 96, softmax=False)),
    "mlp_b1": (5, _mlp(1)),
    "mlp_b64": (5, _mlp(64)),
}
MODELS = {"%s_%s" % (n, d): (n, d) for n in NETWORKS for d in ("float32", "int8")}


# --- the float forward pass (calibration) ---------------------------------------------------


def act_fn(v, act):
    if act == "relu":
        return np.maximum(v, 0)
    if act == "relu6":
        return np.clip(v, 0, 6)
    return v


def conv_forward(x, w, b, s, pads, depthwise):
    pl, pr, pt, pb = pads
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    cout, k, _, cin = w.shape
    n, h, wd, _ = xp.shape
    oh = (h - k) // s + 1
    ow = (wd - k) // s + 1
    taps = [xp[:, i:i + (oh - 1) * s + 1:s, j:j + (ow - 1) * s + 1:s, :]
            for i in range(k) for j in range(k)]
    if depthwise:  # w: [1, k, k, c]
        acc = np.zeros((n, oh, ow, cin), dtype=np.float64)
        for t, (i, j) in enumerate((i, j) for i in range(k) for j in range(k)):
            acc += taps[t] * w[0, i, j, :]
        return acc + b
    cols = np.concatenate(taps, axis=3) if k > 1 else taps[0]
    return cols.astype(np.float64) @ w.reshape(cout, -1).T.astype(np.float64) + b


def forward(net, x):
    """Float64 forward pass; returns every tensor's values."""
    vals = {"input": x.astype(np.float64)}
    for l in net.layers:
        a = vals[l["x"]]
        k = l["kind"]
        if k in ("conv", "dwconv"):
            v = conv_forward(a, l["w"].values, l["b"].values, l["s"], l["pads"], k == "dwconv")
            v = act_fn(v, l["act"])
        elif k == "add":
            v = a + vals[l["y"]]
        elif k == "avgpool":
            v = a.mean(axis=(1, 2), keepdims=True)
        elif k == "reshape":
            v = a.reshape(l["shape"])
        elif k == "fc":
            v = act_fn(a @ l["w"].values.T.astype(np.float64) + l["b"].values, l["act"])
        elif k == "softmax":
            e = np.exp(a - a.max(axis=-1, keepdims=True))
            v = e / e.sum(axis=-1, keepdims=True)
        vals[l["out"]] = v
    return vals


# --- quantization ---------------------------------------------------------------------------


def activation_params(lo, hi):
    """int8 asymmetric (scale, zero point) covering [lo, hi] and 0."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-8:
        return 1.0, 0
    scale = (hi - lo) / 255.0
    zp = int(round(-128 - lo / scale))
    return float(np.float32(scale)), max(-128, min(127, zp))


def quantize_filter(w, axis):
    """Symmetric int8 per channel along `axis` (None: per tensor)."""
    if axis is None:
        m = np.abs(w).max()
        scales = np.array([m / 127.0 if m > 0 else 1.0], dtype=np.float32)
        q = np.clip(np.round(w / scales[0]), -127, 127).astype(np.int8)
        return q, scales
    other = tuple(i for i in range(w.ndim) if i != axis)
    m = np.abs(w).max(axis=other)
    scales = np.where(m > 0, m / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scales.reshape(shape)), -127, 127).astype(np.int8)
    return q, scales


def quant_params(net, vals):
    """Per activation tensor: (scale, zero point)."""
    qp = {}
    for name in ["input"] + [l["out"] for l in net.layers]:
        v = vals[name]
        qp[name] = activation_params(v.min(), v.max())
    for l in net.layers:
        if l["kind"] in ("avgpool", "reshape"):
            qp[l["out"]] = qp[l["x"]]
        elif l["kind"] == "softmax":
            qp[l["out"]] = (1.0 / 256.0, -128)
    return qp


# --- a network in one numeric type, ready to write ------------------------------------------


class Tensor:
    """One tensor as both files see it."""

    def __init__(self, name, shape, dtype, scale=0.0, zp=0, channel=None, data=None, texts=None):
        self.name, self.shape, self.dtype = name, list(shape), dtype
        self.scale, self.zp = scale, zp
        self.channel = channel  # (axis, scales) for per-channel filters
        self.data = data  # ndarray of the stored type for constants
        self.texts = texts  # JSON texts of the values (floats), else None


def lower(net, dtype, vals):
    """The network's tensors and operations in `dtype` ("float32" or "int8")."""
    q = dtype == "int8"
    qp = quant_params(net, vals) if q else {}
    tensors = {}
    ops = []

    def act(name):
        if name not in tensors:
            if q:
                s, z = qp[name]
                tensors[name] = Tensor(name, net.shapes[name], "int8", s, z)
            else:
                tensors[name] = Tensor(name, net.shapes[name], "float32")
        return name

    def const(name, c, axis, in_scale):
        """Filter and bias constants of a layer."""
        if not q:
            tensors[name + "_w"] = Tensor(name + "_w", c["w"].values.shape, "float32",
                                          data=c["w"].values, texts=c["w"].texts)
            tensors[name + "_b"] = Tensor(name + "_b", c["b"].values.shape, "float32",
                                          data=c["b"].values, texts=c["b"].texts)
            return name + "_w", name + "_b"
        wq, ws = quantize_filter(c["w"].values.astype(np.float64), axis)
        bias_scales = (np.float64(in_scale) * ws.astype(np.float64))
        bq = np.round(c["b"].values.astype(np.float64) / bias_scales).astype(np.int64)
        bq = np.clip(bq, -(2**31), 2**31 - 1).astype(np.int32)
        if axis is None:
            tensors[name + "_w"] = Tensor(name + "_w", wq.shape, "int8", float(ws[0]), 0, data=wq)
            tensors[name + "_b"] = Tensor(name + "_b", bq.shape, "int32",
                                          float(np.float32(in_scale * float(ws[0]))), 0, data=bq)
        else:
            tensors[name + "_w"] = Tensor(name + "_w", wq.shape, "int8_pc",
                                          channel=(axis, ws), data=wq)
            tensors[name + "_b"] = Tensor(name + "_b", bq.shape, "int32_pc",
                                          channel=(0, (np.float64(in_scale) * ws).astype(np.float32)),
                                          data=bq)
        return name + "_w", name + "_b"

    act("input")
    for i, l in enumerate(net.layers):
        k = l["kind"]
        x = act(l["x"])
        out = act(l["out"])
        op = dict(kind=k, inputs=[x], out=out, layer=l)
        in_scale = tensors[x].scale
        if k in ("conv", "dwconv", "fc"):
            axis = {"conv": 0, "dwconv": 3, "fc": None}[k]
            w, b = const("l%d" % i, l, axis, in_scale)
            op["inputs"] += [w, b]
        elif k == "add":
            op["inputs"].append(act(l["y"]))
        ops.append(op)
    return tensors, ops


# --- the nnaccel JSON model -----------------------------------------------------------------

NN_TYPES = {"float32": "TENSOR_FLOAT32", "int8": "TENSOR_QUANT8_ASYMM_SIGNED",
            "int8_pc": "TENSOR_QUANT8_SYMM_PER_CHANNEL", "int32": "TENSOR_INT32",
            "int32_pc": "TENSOR_INT32"}


def values_text(t):
    if t.texts is not None:
        return ", ".join(t.texts)
    return ", ".join(map(str, t.data.ravel().tolist()))


def write_nnaccel(path, net, tensors, ops):
    lines = []
    index = {}

    def operand(fields, value=None):
        text = json.dumps(fields)
        if value is not None:
            text = text[:-1] + ', "value": [' + value + "]}"
        lines.append(text)
        return len(lines) - 1

    def scalar(ty, v):
        return operand({"type": ty, "dimensions": [], "lifetime": "CONSTANT_COPY"}, repr(v))

    def tensor(name):
        if name in index:
            return index[name]
        t = tensors[name]
        fields = {"type": NN_TYPES[t.dtype], "dimensions": t.shape}
        # Per-channel biases (int32_pc) keep scale 0: NNAPI takes each value's scale as
        # input scale * filter scale[c].
        if t.dtype in ("int8", "int32"):
            fields["scale"] = t.scale
            fields["zeroPoint"] = t.zp
        if name == "input":
            fields["lifetime"] = "MODEL_INPUT"
        elif name == net.output:
            fields["lifetime"] = "MODEL_OUTPUT"
        elif t.data is not None:
            fields["lifetime"] = "CONSTANT_COPY"
        else:
            fields["lifetime"] = "TEMPORARY_VARIABLE"
        if t.dtype == "int8_pc":
            fields["channelQuant"] = {"channelDim": t.channel[0],
                                      "scales": [float(s) for s in t.channel[1]]}
        index[name] = operand(fields, values_text(t) if t.data is not None else None)
        return index[name]

    operations = []
    for op in ops:
        l = op["layer"]
        k = op["kind"]
        ins = [tensor(n) for n in op["inputs"]]
        if k in ("conv", "dwconv"):
            ins += [scalar("INT32", p) for p in l["pads"]]
            ins += [scalar("INT32", l["s"]), scalar("INT32", l["s"])]
            if k == "dwconv":
                ins.append(scalar("INT32", 1))
            ins.append(scalar("INT32", NNAPI_ACT[l["act"]]))
            ty = "CONV_2D" if k == "conv" else "DEPTHWISE_CONV_2D"
        elif k == "fc":
            ins.append(scalar("INT32", NNAPI_ACT[l["act"]]))
            ty = "FULLY_CONNECTED"
        elif k == "add":
            ins.append(scalar("INT32", 0))
            ty = "ADD"
        elif k == "avgpool":
            ins += [scalar("INT32", v) for v in (0, 0, 0, 0, 1, 1, l["kw"], l["kh"], 0)]
            ty = "AVERAGE_POOL_2D"
        elif k == "reshape":
            ins.append(operand({"type": "TENSOR_INT32", "dimensions": [len(l["shape"])],
                                "lifetime": "CONSTANT_COPY"}, ", ".join(map(str, l["shape"]))))
            ty = "RESHAPE"
        elif k == "softmax":
            ins.append(scalar("FLOAT32", 1.0))
            ty = "SOFTMAX"
        operations.append({"type": ty, "inputs": ins, "outputs": [tensor(op["out"])]})
    body = ('{\n  "version": 1,\n  "operands": [\n    ' + ",\n    ".join(lines) + "\n  ],\n"
            '  "operations": [\n    ' + ",\n    ".join(json.dumps(o) for o in operations)
            + "\n  ],\n"
            '  "inputIndexes": [%d],\n  "outputIndexes": [%d],\n'
            '  "relaxComputationFloat32toFloat16": false\n}\n'
            % (index["input"], index[net.output]))
    atomic_write(path, body.encode())


# --- the .tflite model ----------------------------------------------------------------------


# Layer kind -> the TFLite BuiltinOptions member and its object-API class.
OPTIONS = {"conv": ("Conv2DOptions", "Conv2DOptionsT"),
           "dwconv": ("DepthwiseConv2DOptions", "DepthwiseConv2DOptionsT"),
           "fc": ("FullyConnectedOptions", "FullyConnectedOptionsT"),
           "add": ("AddOptions", "AddOptionsT"),
           "avgpool": ("Pool2DOptions", "Pool2DOptionsT"),
           "reshape": ("ReshapeOptions", "ReshapeOptionsT"),
           "softmax": ("SoftmaxOptions", "SoftmaxOptionsT")}


def write_tflite(path, net, tensors, ops):
    import flatbuffers
    from ai_edge_litert import schema_py_generated as S

    class AlignedBufferT(S.BufferT):
        """A buffer whose bytes start 16-byte aligned (the object API's aligns to 1)."""

        def Pack(self, builder):
            data = None
            if self.data is not None:
                raw = self.data
                builder.StartVector(1, len(raw), 16)
                builder.head = builder.head - len(raw)
                builder.Bytes[builder.head:builder.head + len(raw)] = raw
                data = builder.EndVector()
            S.BufferStart(builder)
            if data is not None:
                S.BufferAddData(builder, data)
            return S.BufferEnd(builder)

    tf_types = {"float32": S.TensorType.FLOAT32, "int8": S.TensorType.INT8,
                "int8_pc": S.TensorType.INT8, "int32": S.TensorType.INT32,
                "int32_pc": S.TensorType.INT32, "int32_plain": S.TensorType.INT32}
    buffers = [AlignedBufferT()]
    tlist = []
    tindex = {}

    def tensor(name, t=None):
        if name in tindex:
            return tindex[name]
        t = t or tensors[name]
        tt = S.TensorT()
        tt.shape = list(t.shape)
        tt.type = tf_types[t.dtype]
        tt.name = name
        tt.buffer = 0
        if t.data is not None:
            b = AlignedBufferT()
            b.data = t.data.tobytes()
            buffers.append(b)
            tt.buffer = len(buffers) - 1
        if t.dtype in ("int8", "int32"):
            qp = S.QuantizationParametersT()
            qp.scale, qp.zeroPoint = [float(t.scale)], [int(t.zp)]
            tt.quantization = qp
        elif t.dtype in ("int8_pc", "int32_pc"):
            qp = S.QuantizationParametersT()
            qp.scale = [float(s) for s in t.channel[1]]
            qp.zeroPoint = [0] * len(qp.scale)
            qp.quantizedDimension = t.channel[0]
            tt.quantization = qp
        tlist.append(tt)
        tindex[name] = len(tlist) - 1
        return tindex[name]

    q = tensors["input"].dtype == "int8"
    # Operator versions as the converter gives them for these types (int8 kernels need the
    # versions that introduced them).
    versions = {"conv": (S.BuiltinOperator.CONV_2D, 3 if q else 1),
                "dwconv": (S.BuiltinOperator.DEPTHWISE_CONV_2D, 3 if q else 1),
                "fc": (S.BuiltinOperator.FULLY_CONNECTED, 4 if q else 1),
                "add": (S.BuiltinOperator.ADD, 2 if q else 1),
                "avgpool": (S.BuiltinOperator.AVERAGE_POOL_2D, 2 if q else 1),
                "reshape": (S.BuiltinOperator.RESHAPE, 1),
                "softmax": (S.BuiltinOperator.SOFTMAX, 2 if q else 1)}
    codes, code_index = [], {}
    operators = []
    for op in ops:
        l, k = op["layer"], op["kind"]
        code, version = versions[k]
        if k not in code_index:
            oc = S.OperatorCodeT()
            oc.builtinCode = code
            oc.deprecatedBuiltinCode = min(code, 127)
            oc.version = version
            codes.append(oc)
            code_index[k] = len(codes) - 1
        o = S.OperatorT()
        o.opcodeIndex = code_index[k]
        o.inputs = [tensor(n) for n in op["inputs"]]
        act = NNAPI_ACT[l.get("act")]
        kind_name, cls = OPTIONS[k]
        o.builtinOptionsType = getattr(S.BuiltinOptions, kind_name)
        o.builtinOptions = opts = getattr(S, cls)()
        if k in ("conv", "dwconv"):
            opts.padding = S.Padding.SAME
            opts.strideW = opts.strideH = l["s"]
            opts.fusedActivationFunction = act
            if k == "dwconv":
                opts.depthMultiplier = 1
        elif k == "fc":
            opts.fusedActivationFunction = act
        elif k == "avgpool":
            opts.padding = S.Padding.VALID
            opts.strideW = opts.strideH = 1
            opts.filterWidth, opts.filterHeight = l["kw"], l["kh"]
        elif k == "reshape":
            shape = np.array(l["shape"], dtype=np.int32)
            o.inputs.append(tensor(op["out"] + "_shape",
                                   Tensor(op["out"] + "_shape", [len(l["shape"])], "int32_plain",
                                          data=shape)))
            opts.newShape = list(l["shape"])
        elif k == "softmax":
            opts.beta = 1.0
        o.outputs = [tensor(op["out"])]
        operators.append(o)
    sg = S.SubGraphT()
    sg.tensors, sg.operators, sg.name = tlist, operators, "main"
    sg.inputs, sg.outputs = [tindex["input"]], [tindex[net.output]]
    model = S.ModelT()
    model.version = 3
    model.description = "nnaccel scripts/models/gen.py: " + net.name
    model.operatorCodes, model.subgraphs, model.buffers = codes, [sg], buffers
    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    atomic_write(path, bytes(builder.Output()))


# --- driver ---------------------------------------------------------------------------------


def atomic_write(path, data):
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def script_hash():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def input_values(rng, shape):
    return round3(rng.uniform(-1.0, 1.0, size=shape))


def build(name, out_dir, json_only, stats):
    network, dtype = MODELS[name]
    seed_offset, make = NETWORKS[network]
    rng = np.random.default_rng([SEED, seed_offset])
    net = make(rng, network)
    x, x_texts = input_values(np.random.default_rng([SEED, 0]), net.input_shape)
    vals = forward(net, x)
    tensors, ops = lower(net, dtype, vals)
    base = os.path.join(out_dir, name)
    if stats:
        for l in net.layers:
            v = vals[l["out"]]
            print("%-8s %-18s mean %9.4f std %9.4f min %9.4f max %9.4f"
                  % (l["kind"], net.shapes[l["out"]], v.mean(), v.std(), v.min(), v.max()),
                  file=sys.stderr)
    if dtype == "int8":
        s, z = tensors["input"].scale, tensors["input"].zp
        xq = np.clip(np.round(x.astype(np.float64) / s) + z, -128, 127).astype(np.int8)
        inputs_text = ", ".join(map(str, xq.ravel().tolist()))
    else:
        inputs_text = ", ".join(x_texts)
    write_nnaccel(base + ".json", net, tensors, ops)
    atomic_write(base + ".inputs.json", ('{"inputs": [[' + inputs_text + "]]}\n").encode())
    if not json_only:
        write_tflite(base + ".tflite", net, tensors, ops)
    out = tensors[net.output]
    meta = {
        "name": name, "network": network, "dtype": dtype, "macs": net.macs(),
        "input": {"shape": net.input_shape, "scale": tensors["input"].scale,
                  "zeroPoint": tensors["input"].zp},
        "output": {"shape": out.shape, "scale": out.scale, "zeroPoint": out.zp},
        "tflite": not json_only, "gen": script_hash(),
    }
    atomic_write(base + ".meta.json", (json.dumps(meta) + "\n").encode())


def up_to_date(name, out_dir, json_only):
    try:
        with open(os.path.join(out_dir, name + ".meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return False
    return meta.get("gen") == script_hash() and (json_only or meta.get("tflite"))


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=False, help="output directory")
    p.add_argument("--json-only", action="store_true", help="no .tflite (no LiteRT wheel)")
    p.add_argument("--force", action="store_true", help="rebuild even when up to date")
    p.add_argument("--stats", action="store_true", help="print each layer's float statistics")
    p.add_argument("--list", action="store_true", help="list the model names")
    p.add_argument("names", nargs="*")
    a = p.parse_args()
    if a.list:
        print("\n".join(MODELS))
        return 0
    if not a.out:
        p.error("--out is required")
    unknown = [n for n in a.names if n not in MODELS]
    if unknown:
        p.error("unknown model %s (--list shows them)" % ", ".join(unknown))
    os.makedirs(a.out, exist_ok=True)
    for name in a.names:
        if a.force or not up_to_date(name, a.out, a.json_only):
            print("gen.py: building %s" % name, file=sys.stderr)
            build(name, a.out, a.json_only, a.stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
