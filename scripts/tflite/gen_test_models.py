#!/usr/bin/env python3
"""Writes the small .tflite models of the TFLite import's agreement test (tests/tflite.rs) into
tests/data/tflite/, with the flatbuffers schema module that ships in the ai-edge-litert wheel
(object API: ModelT, SubGraphT, ...). Run it with the LiteRT venv's python
(scripts/litert-venv.sh):

    $(scripts/litert-venv.sh) scripts/tflite/gen_test_models.py [--out DIR] [--check] [NAME...]

For each model NAME it writes:

- NAME.tflite      the model;
- NAME.inputs.npz  its inputs, one array per input named by the input tensor's name, holding
                   the tensor's own element type (a quantized input holds the quantized
                   integers);

and manifest.json lists every model: its quantization scheme, the TFLite operators it uses,
the LiteRT resolver to compare with ("ref", TFLite's reference kernels, or "default"), and
what the test expects of it: "agree" with LiteRT (a few with a wider `float_tolerance` or a
`litert_then` function, each with its `why`), or "error": nnaccelctl exits 2 with a message
naming each of `mentions` (the operator and its node index, or the tensor type).

Everything is deterministic: weights and inputs come from numpy generators seeded with the
model's name, float values are rounded to 3 significant digits, the .npz files are zip
archives with fixed member dates. `--check` builds everything into a temporary directory and
compares it byte for byte with the checked-in files (exit 1 and the differing names when they
differ).

How a model is made: each model is a function over a builder `G` that declares inputs,
constants (filters, biases, plain int32 tensors) and operators in float terms; the scheme
decides the element types: f32 (float32 throughout), u8 (uint8 asymmetric per-tensor, filters
too), i8 (int8 asymmetric activations, int8 symmetric per-channel filters for CONV_2D /
DEPTHWISE_CONV_2D / TRANSPOSE_CONV and per-tensor for FULLY_CONNECTED: TFLite's full-integer
scheme), i8t (as i8 with per-tensor conv filters), i16 (16x8: int16 symmetric activations,
int8 per-channel filters, int64 biases). A model is built twice: first in float32, run once on
LiteRT with every tensor kept, which gives every tensor's shape (so the model functions never
compute output shapes by hand) and, for quantized schemes, its value range (the calibration);
then in its scheme with those shapes and ranges. Operators that TFLite requires to keep their
input's quantization (pools, reshapes, slices, ...) or that have a fixed output quantization
(SOFTMAX, LOGISTIC, TANH) get it.
"""

import argparse
import filecmp
import io
import json
import os
import shutil
import sys
import tempfile
import zipfile
import zlib

import numpy as np

sys.dont_write_bytecode = True

import flatbuffers  # noqa: E402  (the wheel's dependency)
from ai_edge_litert import schema_py_generated as S  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "tflite")
SEED = 20251126
OP = S.BuiltinOperator
ACT = S.ActivationFunctionType
SAME, VALID = S.Padding.SAME, S.Padding.VALID

# TFLite's fixed output quantization of some int8 kernels (scale, zero point); uint8 is the same
# scale with the zero point moved by 128, int16 is symmetric over the same real range.
FIXED_INT8 = {"softmax": (1.0 / 256, -128), "logistic": (1.0 / 256, -128),
              "tanh": (1.0 / 128, 0)}
FIXED_INT16 = {"softmax": (1.0 / 32768, 0), "logistic": (1.0 / 32768, 0),
               "tanh": (1.0 / 32768, 0)}


def round3(a):
    """Values rounded to 3 significant decimal digits, as float32."""
    flat = np.asarray(a, dtype=np.float64).ravel()
    return np.array(["%.3g" % x for x in flat.tolist()], dtype=np.float64) \
        .astype(np.float32).reshape(np.shape(a))


def nice_scale(x):
    """A scale a little above x, rounded to 3 significant digits: small differences in the
    calibration run (another libm) do not change the model's bytes."""
    return float(np.float32(float("%.3g" % (x * 1.02))))


class Q:
    """Quantization of one tensor."""

    def __init__(self, scales, zps, axis=0):
        self.scales = [float(np.float32(s)) for s in scales]
        self.zps = [int(z) for z in zps]
        self.axis = axis

    @property
    def scale(self):
        return self.scales[0]

    @property
    def zp(self):
        return self.zps[0]


class T:
    """One tensor being built."""

    def __init__(self, g, index, name, shape, ttype, q=None, data=None, float_values=None):
        self.g, self.index, self.name = g, index, name
        self.shape, self.ttype, self.q = shape, ttype, q
        self.data = data  # bytes of a constant
        self.float_values = float_values  # a constant's real values (filters)
        self.sparsity = None
        self.is_variable = False


NP_TYPES = {S.TensorType.FLOAT32: np.float32, S.TensorType.FLOAT16: np.float16,
            S.TensorType.INT32: np.int32, S.TensorType.UINT8: np.uint8,
            S.TensorType.INT64: np.int64, S.TensorType.INT16: np.int16,
            S.TensorType.INT8: np.int8, S.TensorType.BOOL: np.bool_}


class Sub:
    def __init__(self, name):
        self.name = name
        self.tensors, self.ops, self.inputs, self.outputs = [], [], [], []


class G:
    """Builds one model in one scheme. `shapes` and `ranges` (by tensor name) come from the
    float calibration run; without them (the first build) every output shape is left for
    LiteRT to infer and every range is [-1, 1]."""

    def __init__(self, name, scheme, shapes=None, ranges=None):
        self.name, self.scheme = name, scheme
        self.shapes, self.ranges = shapes, ranges
        self.rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
        self.subs = [Sub("main")]
        self.sub = self.subs[0]
        self.buffers = [b""]
        self.codes = []  # (builtin code, custom code, version)
        self.feeds = {}  # input name -> real values
        self.ops_used = []

    # --- element types of the scheme -------------------------------------------------------

    @property
    def quantized(self):
        return self.scheme != "f32"

    def act_type(self):
        return {"f32": S.TensorType.FLOAT32, "u8": S.TensorType.UINT8,
                "i8": S.TensorType.INT8, "i8t": S.TensorType.INT8,
                "i16": S.TensorType.INT16}[self.scheme]

    def act_q(self, lo, hi):
        """Activation quantization covering [lo, hi] and 0."""
        lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
        if self.scheme == "i16":
            return Q([nice_scale(max(-lo, hi, 1e-6) / 32767.0)], [0])
        scale = nice_scale(max(hi - lo, 1e-6) / 255.0)
        zp = int(round(-128 - lo / scale))
        zp = max(-128, min(127, zp))
        if self.scheme == "u8":
            zp += 128
        return Q([scale], [zp])

    def fixed_q(self, kind):
        if self.scheme == "i16":
            s, z = FIXED_INT16[kind]
        else:
            s, z = FIXED_INT8[kind]
            if self.scheme == "u8":
                z += 128
        return Q([s], [z])

    # --- tensors ---------------------------------------------------------------------------

    def _tensor(self, name, shape, ttype, q=None, data=None):
        t = T(self, len(self.sub.tensors), name, list(shape), ttype, q, data)
        self.sub.tensors.append(t)
        return t

    def _const(self, name, array, ttype, q=None):
        array = np.asarray(array, dtype=NP_TYPES[ttype])  # 0-d stays 0-d (a scalar)
        self.buffers.append(array.tobytes())
        t = self._tensor(name, array.shape, ttype, q)
        t.buffer = len(self.buffers) - 1
        return t

    def input(self, name, shape, lo=-1.0, hi=1.0, ttype=None, q=None, values=None):
        """A model input with values drawn uniformly from [lo, hi] (or `values`); quantized
        by that range in a quantized scheme (or by `q` with element type `ttype`)."""
        if values is not None:
            return self._feed(name, shape, ttype, q, np.asarray(values, NP_TYPES[ttype]))
        if ttype == S.TensorType.BOOL:
            values = self.rng.uniform(size=shape) < 0.5
            return self._feed(name, shape, ttype, None, values)
        if ttype == S.TensorType.INT32 and q is None:
            values = self.rng.integers(int(lo), int(hi), endpoint=True, size=shape)
            return self._feed(name, shape, ttype, None, values.astype(np.int32))
        real = round3(self.rng.uniform(lo, hi, size=shape))
        if ttype is None:
            ttype = self.act_type()
            q = self.act_q(lo, hi) if self.quantized else None
        return self._feed(name, shape, ttype, q, quantize(real, ttype, q))

    def _feed(self, name, shape, ttype, q, values):
        t = self._tensor(name, shape, ttype, q)
        self.sub.inputs.append(t.index)
        self.feeds[name] = np.asarray(values).reshape(shape)
        return t

    def sub_input(self, name, shape, ttype):
        """An input of the current (called) subgraph."""
        t = self._tensor(name, shape, ttype)
        self.sub.inputs.append(t.index)
        return t

    def output(self, *ts):
        self.sub.outputs.extend(t.index for t in ts)

    def act(self, name, like=None, fixed=None, ttype=None, q=None, shape=None):
        """An operator's output: its shape from the calibration run (or `shape`, for a model
        LiteRT cannot run); in a quantized scheme the quantization of `like` (a tensor), a
        fixed one (`fixed`: "softmax", ...), or the calibrated range."""
        if shape is None:
            shape = self.shapes.get(name, []) if self.shapes else []
        if ttype is not None:
            return self._tensor(name, shape, ttype, q)
        if not self.quantized:
            return self._tensor(name, shape, S.TensorType.FLOAT32)
        if like is not None:
            q = like.q
        elif fixed is not None:
            q = self.fixed_q(fixed)
        else:
            lo, hi = self.ranges.get(name, (-1.0, 1.0)) if self.ranges else (-1.0, 1.0)
            q = self.act_q(lo, hi)
        return self._tensor(name, shape, self.act_type(), q)

    def weights(self, shape, fan_in):
        return round3(self.rng.standard_normal(shape) * np.sqrt(1.0 / fan_in))

    def filter(self, name, values, axis):
        """A filter or weight matrix with real `values`: float32, or quantized as the scheme
        quantizes filters (per-channel along `axis` in i8 and i16; None: per-tensor)."""
        values = np.asarray(values, dtype=np.float32)
        if not self.quantized:
            t = self._const(name, values, S.TensorType.FLOAT32)
        elif self.scheme == "u8":
            lo, hi = min(values.min(), 0.0), max(values.max(), 0.0)
            scale = float(np.float32((hi - lo) / 255.0))
            zp = int(round(-lo / scale))
            qv = np.clip(np.round(values / scale) + zp, 0, 255)
            t = self._const(name, qv, S.TensorType.UINT8, Q([scale], [zp]))
        else:
            if self.scheme == "i8t":
                axis = None
            if axis is None:
                m = float(np.abs(values).max())
                scales = np.array([m / 127.0 if m > 0 else 1.0], dtype=np.float32)
                qv = np.clip(np.round(values / scales[0]), -127, 127)
                q = Q(scales, [0])
            else:
                other = tuple(i for i in range(values.ndim) if i != axis)
                m = np.abs(values).max(axis=other)
                scales = np.where(m > 0, m / 127.0, 1.0).astype(np.float32)
                bshape = [1] * values.ndim
                bshape[axis] = -1
                qv = np.clip(np.round(values / scales.reshape(bshape)), -127, 127)
                q = Q(scales, [0] * len(scales), axis)
            t = self._const(name, qv, S.TensorType.INT8, q)
        t.float_values = values
        return t

    def bias(self, name, n, x, w):
        """A bias of `n` values for an operator with input `x` and filter `w`: float32, or
        int32 (int64 in i16) at scale x.scale * w.scale[c]."""
        values = round3(self.rng.standard_normal(n) * 0.1)
        if not self.quantized:
            return self._const(name, values, S.TensorType.FLOAT32)
        ws = np.array(w.q.scales, dtype=np.float64)
        scales = np.float64(x.q.scale) * ws
        per = np.broadcast_to(scales, (n,))
        qv = np.round(values.astype(np.float64) / per)
        ttype = S.TensorType.INT64 if self.scheme == "i16" else S.TensorType.INT32
        q = Q([float(s) for s in scales], [0] * len(scales), 0)
        return self._const(name, qv, ttype, q)

    def i32(self, name, values):
        """A plain int32 constant (shapes, axes, indices)."""
        return self._const(name, np.array(values, dtype=np.int32), S.TensorType.INT32)

    def const(self, name, values, ttype=S.TensorType.FLOAT32, q=None):
        """A constant of `ttype` holding `values` (already in the stored type)."""
        return self._const(name, values, ttype, q)

    # --- operators -------------------------------------------------------------------------

    def op(self, code, inputs, outputs, options=None, version=1, custom=None):
        """Appends an operator: `options` is (BuiltinOptions member name, {field: value})."""
        key = (code, custom, version)
        if key not in self.codes:
            self.codes.append(key)
        o = S.OperatorT()
        o.opcodeIndex = self.codes.index(key)
        o.inputs = [-1 if t is None else t.index for t in inputs]
        o.outputs = [t.index for t in outputs]
        if options is not None:
            kind, fields = options
            o.builtinOptionsType = getattr(S.BuiltinOptions, kind)
            opts = getattr(S, kind + "T")()
            for k, v in fields.items():
                if not hasattr(opts, k):
                    raise AttributeError("%sT has no field %s" % (kind, k))
                setattr(opts, k, v)
            o.builtinOptions = opts
        if custom is not None:
            o.customOptions = []
        self.sub.ops.append(o)
        name = custom if code == OP.CUSTOM else op_name(code)
        if name not in self.ops_used:
            self.ops_used.append(name)
        return outputs[0] if len(outputs) == 1 else outputs

    def new_subgraph(self, name):
        self.subs.append(Sub(name))
        self.sub = self.subs[-1]
        return len(self.subs) - 1

    def use_subgraph(self, index):
        self.sub = self.subs[index]

    # --- writing ---------------------------------------------------------------------------

    def to_bytes(self):
        model = S.ModelT()
        model.version = 3
        model.description = "nnaccel scripts/tflite/gen_test_models.py: " + self.name
        codes = []
        for code, custom, version in self.codes:
            oc = S.OperatorCodeT()
            oc.builtinCode = code
            oc.deprecatedBuiltinCode = min(code, OP.PLACEHOLDER_FOR_GREATER_OP_CODES)
            oc.version = version
            if custom is not None:
                oc.customCode = custom
            codes.append(oc)
        model.operatorCodes = codes
        model.subgraphs = []
        for sub in self.subs:
            sg = S.SubGraphT()
            sg.name = sub.name
            sg.inputs, sg.outputs = list(sub.inputs), list(sub.outputs)
            sg.operators = sub.ops
            sg.tensors = [tensor_t(t) for t in sub.tensors]
            model.subgraphs.append(sg)
        model.buffers = [AlignedBufferT(b) for b in self.buffers]
        builder = flatbuffers.Builder(1 << 16)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())


class AlignedBufferT(S.BufferT):
    """A buffer whose bytes start 16-byte aligned (the object API's start anywhere)."""

    def __init__(self, raw):
        super().__init__()
        self.raw = raw

    def Pack(self, builder):
        vec = None
        if self.raw:
            # Align the end of the bytes (the builder writes backwards) so that their start,
            # after the length prefix is written, falls on 16 bytes.
            builder.Prep(16, len(self.raw))
            vec = builder.CreateNumpyVector(np.frombuffer(self.raw, dtype=np.uint8))
        S.BufferStart(builder)
        if vec is not None:
            S.BufferAddData(builder, vec)
        return S.BufferEnd(builder)


def tensor_t(t):
    tt = S.TensorT()
    tt.name, tt.shape, tt.type = t.name, list(t.shape), t.ttype
    tt.buffer = getattr(t, "buffer", 0)
    tt.isVariable = t.is_variable
    if t.q is not None:
        qp = S.QuantizationParametersT()
        qp.scale, qp.zeroPoint = list(t.q.scales), list(t.q.zps)
        qp.quantizedDimension = t.q.axis
        tt.quantization = qp
    if t.sparsity is not None:
        tt.sparsity = t.sparsity
    return tt


def op_name(code):
    for k, v in vars(OP).items():
        if v == code and not k.startswith("_"):
            return k
    raise KeyError(code)


def quantize(real, ttype, q):
    """Real values in a tensor of `ttype` with quantization `q`."""
    if q is None:
        return np.asarray(real, dtype=NP_TYPES[ttype])
    info = np.iinfo(NP_TYPES[ttype])
    v = np.round(np.asarray(real, dtype=np.float64) / q.scale) + q.zp
    return np.clip(v, info.min, info.max).astype(NP_TYPES[ttype])


# --- small helpers for options ----------------------------------------------------------------


def conv_opts(padding, stride, dilation=1, act=ACT.NONE):
    return ("Conv2DOptions", dict(padding=padding, strideW=stride, strideH=stride,
                                  dilationWFactor=dilation, dilationHFactor=dilation,
                                  fusedActivationFunction=act))


def dw_opts(padding, stride, mult, dilation=1, act=ACT.NONE):
    return ("DepthwiseConv2DOptions", dict(padding=padding, strideW=stride, strideH=stride,
                                           depthMultiplier=mult, dilationWFactor=dilation,
                                           dilationHFactor=dilation,
                                           fusedActivationFunction=act))


def pool_opts(padding, stride, k, act=ACT.NONE):
    return ("Pool2DOptions", dict(padding=padding, strideW=stride, strideH=stride,
                                  filterWidth=k, filterHeight=k, fusedActivationFunction=act))


def versions(g, float_version, int8_version, int16_version=None):
    """The operator version the converter writes for the scheme's types."""
    if g.scheme == "f32":
        return float_version
    if g.scheme == "i16":
        return int16_version or int8_version
    return int8_version


# --- the models -------------------------------------------------------------------------------
# Each takes a builder and declares the model; output shapes come from the calibration run.


def conv2d(padding, stride, dilation=1, act=ACT.NONE, cin=3, cout=4, k=3, size=9):
    def build(g):
        x = g.input("x", [1, size, size, cin])
        w = g.filter("w", g.weights([cout, k, k, cin], k * k * cin), axis=0)
        b = g.bias("b", cout, x, w)  # TFLite's CONV_2D requires one
        y = g.act("y")
        g.op(OP.CONV_2D, [x, w, b], [y], conv_opts(padding, stride, dilation, act),
             versions(g, 1, 3, 4))
        g.output(y)
    return build


def depthwise(padding, stride, mult, dilation=1, act=ACT.NONE, c=3, k=3, size=8):
    def build(g):
        x = g.input("x", [1, size, size, c])
        w = g.filter("w", g.weights([1, k, k, c * mult], k * k), axis=3)
        b = g.bias("b", c * mult, x, w)
        y = g.act("y")
        g.op(OP.DEPTHWISE_CONV_2D, [x, w, b], [y],
             dw_opts(padding, stride, mult, dilation, act), versions(g, 1, 3, 5))
        g.output(y)
    return build


def transpose_conv(padding, stride, bias=True):
    def build(g):
        cin, cout, k = 3, 2, 3
        x = g.input("x", [1, 4, 4, cin])
        out = 4 * stride if padding == SAME else (4 - 1) * stride + k
        shape = g.i32("output_shape", [1, out, out, cout])
        w = g.filter("w", g.weights([cout, k, k, cin], k * k * cin), axis=0)
        b = g.bias("b", cout, x, w) if bias else None
        y = g.act("y")
        g.op(OP.TRANSPOSE_CONV, [shape, w, x, b], [y],
             ("TransposeConvOptions", dict(padding=padding, strideW=stride, strideH=stride)),
             versions(g, 3, 3, 3))
        g.output(y)
    return build


def fully_connected(in_shape, units, keep_num_dims=False, bias=True, act=ACT.NONE):
    def build(g):
        x = g.input("x", in_shape)
        w = g.filter("w", g.weights([units, in_shape[-1]], in_shape[-1]), axis=None)
        b = g.bias("b", units, x, w) if bias else None
        y = g.act("y")
        g.op(OP.FULLY_CONNECTED, [x, w, b], [y],
             ("FullyConnectedOptions", dict(fusedActivationFunction=act,
                                            keepNumDims=keep_num_dims)),
             versions(g, 1, 4, 7))
        g.output(y)
    return build


def pool(code, padding, stride, k, act=ACT.NONE):
    def build(g):
        x = g.input("x", [1, 7, 7, 3])
        # TFLite's quantized pools keep their input's quantization.
        y = g.act("y", like=x if g.quantized else None)
        g.op(code, [x], [y], pool_opts(padding, stride, k, act), versions(g, 1, 2, 3))
        g.output(y)
    return build


def binary(code, kind, act=ACT.NONE, b_shape=(1, 1, 1, 4), b_range=(-1.0, 1.0)):
    """ADD, SUB, MUL, DIV of a [1,3,3,4] input and a broadcast one."""
    def build(g):
        a = g.input("a", [1, 3, 3, 4])
        b = g.input("b", list(b_shape), *b_range)
        y = g.act("y")
        g.op(code, [a, b], [y], (kind, dict(fusedActivationFunction=act)),
             versions(g, 1, 2, 3))
        g.output(y)
    return build


def concatenation(g):
    """Two inputs of different ranges (uint8 requantizes them; TFLite's int8 kernel requires
    one quantization for all, so there they share one)."""
    a = g.input("a", [1, 3, 3, 2])
    b = g.input("b", [1, 3, 3, 3], *((-1.0, 1.0) if g.scheme == "i8" else (-2.0, 2.0)))
    y = g.act("y", like=a if g.scheme == "i8" else None)
    g.op(OP.CONCATENATION, [a, b], [y],
         ("ConcatenationOptions", dict(axis=-1, fusedActivationFunction=ACT.NONE)),
         versions(g, 1, 2, 3))
    g.output(y)


def unary(code, options=None, fixed=None, same=False, shape=(1, 4, 4, 3), lo=-3.0, hi=3.0,
          version=(1, 2, 3)):
    """One operator of one input: `fixed` names its fixed output quantization, `same` keeps
    the input's."""
    def build(g):
        x = g.input("x", list(shape), lo, hi)
        y = g.act("y", like=x if same and g.quantized else None, fixed=fixed)
        g.op(code, [x], [y], options, versions(g, *version))
        g.output(y)
    return build


def with_consts(code, consts, options=None, same=True, shape=(1, 4, 5, 3), outputs=1,
                version=(1, 2, 3), const_first=False):
    """One operator of an input and int32 constants (shapes, axes, paddings, ...)."""
    def build(g):
        x = g.input("x", list(shape))
        cs = [g.i32(name, v) for name, v in consts]
        ys = [g.act("y%d" % i if outputs > 1 else "y", like=x if same and g.quantized else None)
              for i in range(outputs)]
        ins = cs + [x] if const_first else [x] + cs
        g.op(code, ins, ys, options, versions(g, *version))
        g.output(*ys)
    return build


BOOL, INT32, FLOAT32 = S.TensorType.BOOL, S.TensorType.INT32, S.TensorType.FLOAT32


def generic(code, ins, outs=("y",), options=None, version=(1, 2, 3)):
    """One operator. `ins`, in operand order: ("name", shape[, lo, hi[, type]]) an input
    (type BOOL or INT32 for non-float ones, else the scheme's), ("@name", values) an int32
    constant, ("=name", values) a float32 constant, None an omitted operand. `outs`: names,
    or (name, how): how "same" keeps input 0's quantization, "softmax"/"logistic"/"tanh" the
    fixed one, BOOL/INT32/FLOAT32 a plain type; plain names are calibrated."""
    def build(g):
        operands, first = [], None
        for spec in ins:
            if spec is None:
                operands.append(None)
            elif spec[0].startswith("@"):
                operands.append(g.i32(spec[0][1:], spec[1]))
            elif spec[0].startswith("="):
                operands.append(g.const(spec[0][1:], np.array(spec[1], dtype=np.float32)))
            else:
                name, shape = spec[0], list(spec[1])
                lo, hi = (spec[2], spec[3]) if len(spec) > 2 else (-1.0, 1.0)
                ttype = spec[4] if len(spec) > 4 else None
                t = g.input(name, shape, lo, hi, ttype=ttype)
                first = first or t
                operands.append(t)
        ys = []
        for o in outs:
            name, how = (o, None) if isinstance(o, str) else o
            if how == "same":
                ys.append(g.act(name, like=first if g.quantized else None))
            elif how in FIXED_INT8:
                ys.append(g.act(name, fixed=how))
            elif how is not None:
                ys.append(g.act(name, ttype=how))
            else:
                ys.append(g.act(name))
        g.op(code, operands, ys, options, versions(g, *version))
        g.output(*ys)
    return build


def fill_then_add(g):
    """FILL of constant dims and value, added to an input (a constant output says little)."""
    x = g.input("x", [2, 3])
    f = g.act("filled")
    g.op(OP.FILL, [g.i32("dims", [2, 3]), g.const("value", np.array(0.75, np.float32))], [f],
         ("FillOptions", {}))
    y = g.act("y")
    g.op(OP.ADD, [x, f], [y], ("AddOptions", {}))
    g.output(y)


def hybrid(kind):
    """A float CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED whose constant weights are int8
    (dynamic-range quantization, no DEQUANTIZE node): LiteRT's hybrid kernels quantize the
    input on the fly, nnaccel dequantizes the weights at import and computes in float."""
    def build(g):
        if kind == "fc":
            x = g.input("x", [2, 12])
            real = g.weights([5, 12], 12)
            axis = None
        else:
            x = g.input("x", [1, 6, 6, 3])
            real = g.weights([4, 3, 3, 3] if kind == "conv" else [1, 3, 3, 6], 27)
            axis = 0 if kind == "conv" else 3
        if axis is None:
            scales = np.array([np.abs(real).max() / 127.0], dtype=np.float32)
            qv = np.clip(np.round(real / scales[0]), -127, 127)
            q = Q(scales, [0])
        else:
            other = tuple(i for i in range(real.ndim) if i != axis)
            scales = (np.abs(real).max(axis=other) / 127.0).astype(np.float32)
            shape = [1] * real.ndim
            shape[axis] = -1
            qv = np.clip(np.round(real / scales.reshape(shape)), -127, 127)
            q = Q(scales, [0] * len(scales), axis)
        w = g.const("w", qv, S.TensorType.INT8, q)
        n = real.shape[0] if axis != 3 else real.shape[3]
        b = g.const("b", round3(g.rng.standard_normal(n) * 0.1))
        y = g.act("y", ttype=FLOAT32)
        if kind == "fc":
            g.op(OP.FULLY_CONNECTED, [x, w, b], [y], ("FullyConnectedOptions", {}), 3)
        elif kind == "conv":
            g.op(OP.CONV_2D, [x, w, b], [y], conv_opts(SAME, 1), 2)
        else:
            g.op(OP.DEPTHWISE_CONV_2D, [x, w, b], [y], dw_opts(VALID, 1, 2), 4)
        g.output(y)
    return build


def if_model(cond):
    """IF on an input condition: then y = x + c, else y = x * c (each a subgraph)."""
    def build(g):
        c = g.input("cond", [1], ttype=BOOL, values=np.array([cond]))
        x = g.input("x", [2, 3])
        y = g.act("y")
        g.op(OP.IF, [c, x], [y], ("IfOptions", dict(thenSubgraphIndex=1, elseSubgraphIndex=2)))
        g.output(y)
        for index, (code, kind) in enumerate([(OP.ADD, "AddOptions"), (OP.MUL, "MulOptions")]):
            g.new_subgraph("then" if index == 0 else "else")
            xi = g.sub_input("x", [2, 3], FLOAT32)
            k = g.const("c", round3(g.rng.uniform(0.5, 1.5, size=[1, 3])))
            yi = g.act("y", ttype=FLOAT32, shape=[2, 3])
            g.op(code, [xi, k], [yi], (kind, {}))
            g.sub.outputs.append(yi.index)
        g.use_subgraph(0)
    return build


def while_model(shared, passthrough=True):
    """WHILE i < 3: i += 1, x = x * 0.5 + x0, x0 a loop invariant carried along: its own
    input, or (`shared`) the same tensor as x's start (one tensor passed twice); the body
    returns its x0 input as it is (`passthrough`), or through a MAXIMUM with itself."""
    return lambda g: while_body(g, shared, passthrough)


def while_body(g, shared, passthrough):
    i = g.input("i", [1], ttype=INT32, values=np.array([0], np.int32))
    x = g.input("x", [2, 3])
    x0 = x if shared else g.input("x0", [2, 3])
    i_out = g.act("i_out", ttype=INT32)
    x_out = g.act("y")
    x0_out = g.act("x0_out")
    g.op(OP.WHILE, [i, x, x0], [i_out, x_out, x0_out],
         ("WhileOptions", dict(condSubgraphIndex=1, bodySubgraphIndex=2)))
    g.output(i_out, x_out)
    g.new_subgraph("cond")
    ci = g.sub_input("i", [1], INT32)
    g.sub_input("x", [2, 3], FLOAT32)
    g.sub_input("x0", [2, 3], FLOAT32)
    more = g.act("more", ttype=BOOL, shape=[1])
    g.op(OP.LESS, [ci, g.i32("limit", [3])], [more])
    g.sub.outputs.append(more.index)
    g.new_subgraph("body")
    bi = g.sub_input("i", [1], INT32)
    bx = g.sub_input("x", [2, 3], FLOAT32)
    bx0 = g.sub_input("x0", [2, 3], FLOAT32)
    ni = g.act("i_next", ttype=INT32, shape=[1])
    g.op(OP.ADD, [bi, g.i32("one", [1])], [ni], ("AddOptions", {}))
    half = g.act("half", ttype=FLOAT32, shape=[2, 3])
    g.op(OP.MUL, [bx, g.const("k", np.array([0.5], np.float32))], [half], ("MulOptions", {}))
    nx = g.act("x_next", ttype=FLOAT32, shape=[2, 3])
    g.op(OP.ADD, [half, bx0], [nx], ("AddOptions", {}))
    if not passthrough:
        same = g.act("x0_next", ttype=FLOAT32, shape=[2, 3])
        g.op(OP.MAXIMUM, [bx0, bx0], [same])
        bx0 = same
    g.sub.outputs.extend([ni.index, nx.index, bx0.index])
    g.use_subgraph(0)


def reshape_by_option(g):
    x = g.input("x", [1, 2, 3, 4])
    y = g.act("y", like=x if g.quantized else None)
    g.op(OP.RESHAPE, [x], [y], ("ReshapeOptions", dict(newShape=[2, 12])))
    g.output(y)


def quantize_model(src, dst):
    """QUANTIZE from float32 or int8 (`src`) into `dst` ("i8" or "u8")."""
    def build(g):
        if src == "f32":
            x = g.input("x", [1, 4, 4, 3], -2.0, 2.0, ttype=S.TensorType.FLOAT32)
        else:
            x = g.input("x", [1, 4, 4, 3], -2.0, 2.0, ttype=S.TensorType.INT8,
                        q=Q([4.0 / 255], [-3]))
        if dst == "i8":
            y = g.act("y", ttype=S.TensorType.INT8, q=Q([3.0 / 255], [10]))
        else:
            y = g.act("y", ttype=S.TensorType.UINT8, q=Q([5.0 / 255], [120]))
        g.op(OP.QUANTIZE, [x], [y], None, 1 if src == "f32" else 2)
        g.output(y)
    return build


def dequantize_input(g):
    x = g.input("x", [1, 4, 4, 3], -2.0, 2.0, ttype=S.TensorType.INT8, q=Q([4.0 / 255], [5]))
    y = g.act("y", ttype=S.TensorType.FLOAT32)
    g.op(OP.DEQUANTIZE, [x], [y], None, 2)
    g.output(y)


def dequantized_weights(kind):
    """A CONV_2D whose float filter is a float16 or int8 constant through DEQUANTIZE (the
    converter's float16 and weight-only quantization)."""
    def build(g):
        cin, cout, k = 3, 4, 3
        x = g.input("x", [1, 6, 6, cin])
        real = g.weights([cout, k, k, cin], k * k * cin)
        if kind == "f16":
            w = g.const("w_f16", real.astype(np.float16), S.TensorType.FLOAT16)
        else:
            m = np.abs(real).max(axis=(1, 2, 3))
            scales = (m / 127.0).astype(np.float32)
            if kind == "i8":  # per tensor
                scales = np.full_like(scales, scales.max())
                q = Q(scales[:1], [0])
            else:  # per channel along the output channels
                q = Q(scales, [0] * cout, 0)
            qv = np.clip(np.round(real / scales.reshape(-1, 1, 1, 1)), -127, 127)
            w = g.const("w_int8", qv, S.TensorType.INT8, q)
        wf = g.act("w", ttype=S.TensorType.FLOAT32)
        g.op(OP.DEQUANTIZE, [w], [wf], None, 3 if kind == "f16" else 2)
        b = g.const("b", round3(g.rng.standard_normal(cout) * 0.1))
        y = g.act("y", ttype=S.TensorType.FLOAT32)
        g.op(OP.CONV_2D, [x, wf, b], [y], conv_opts(SAME, 1, 1, ACT.RELU))
        g.output(y)
    return build


def densify(g):
    """FULLY_CONNECTED of weights stored sparse (CSR over the input dimension) through
    DENSIFY."""
    units, cin = 6, 10
    x = g.input("x", [2, cin])
    dense = g.weights([units, cin], cin)
    dense[g.rng.uniform(size=dense.shape) < 0.6] = 0.0
    segments, indices, values = [0], [], []
    for r in range(units):
        for c in range(cin):
            if dense[r, c] != 0.0:
                indices.append(c)
                values.append(dense[r, c])
        segments.append(len(indices))
    w = g.const("w_sparse", np.array(values, dtype=np.float32))
    w.shape = [units, cin]
    sp = S.SparsityParametersT()
    sp.traversalOrder = [0, 1]
    d0 = S.DimensionMetadataT()
    d0.format, d0.denseSize = S.DimensionType.DENSE, units
    d1 = S.DimensionMetadataT()
    d1.format = S.DimensionType.SPARSE_CSR
    d1.arraySegmentsType = d1.arrayIndicesType = S.SparseIndexVector.Int32Vector
    d1.arraySegments, d1.arrayIndices = S.Int32VectorT(), S.Int32VectorT()
    d1.arraySegments.values, d1.arrayIndices.values = segments, indices
    sp.dimMetadata = [d0, d1]
    w.sparsity = sp
    # LiteRT reports DENSIFY's output under another name: its shape is given here.
    wd = g.act("w", ttype=S.TensorType.FLOAT32, shape=[units, cin])
    g.op(OP.DENSIFY, [w], [wd])
    b = g.const("b", round3(g.rng.standard_normal(units) * 0.1))
    y = g.act("y", ttype=S.TensorType.FLOAT32)
    g.op(OP.FULLY_CONNECTED, [x, wd, b], [y], ("FullyConnectedOptions", {}))
    g.output(y)


def variables(g):
    """A resource variable initialised by CALL_ONCE's init subgraph: y = x + acc, acc := y."""
    x = g.input("x", [1, 4])
    g.op(OP.CALL_ONCE, [], [], ("CallOnceOptions", dict(initSubgraphIndex=1)))
    h = g.act("acc_handle", ttype=S.TensorType.RESOURCE)
    g.op(OP.VAR_HANDLE, [], [h], ("VarHandleOptions", dict(sharedName="acc")))
    v = g.act("acc_value", ttype=S.TensorType.FLOAT32)
    g.op(OP.READ_VARIABLE, [h], [v])
    y = g.act("y", ttype=S.TensorType.FLOAT32)
    g.op(OP.ADD, [x, v], [y], ("AddOptions", dict(fusedActivationFunction=ACT.NONE)))
    g.op(OP.ASSIGN_VARIABLE, [h, y], [])
    g.output(y)
    main_shapes = g.shapes
    g.new_subgraph("init")
    g.shapes = {"init_handle": []}
    hi = g.act("init_handle", ttype=S.TensorType.RESOURCE)
    g.op(OP.VAR_HANDLE, [], [hi], ("VarHandleOptions", dict(sharedName="acc")))
    init = g.const("acc_init", round3(g.rng.uniform(-1, 1, size=[1, 4])))
    g.op(OP.ASSIGN_VARIABLE, [hi, init], [])
    g.shapes = main_shapes
    g.use_subgraph(0)


def state_tensor(g, name, shape):
    """A FLOAT32 variable tensor (zero-initialised by LiteRT, which refuses a buffer)."""
    t = g._tensor(name, shape, S.TensorType.FLOAT32)
    t.is_variable = True
    return t


def int8_weights(g, name, real):
    """Real weights as an int8 constant, symmetric per-tensor: dynamic-range quantization,
    which LiteRT runs with its hybrid kernels."""
    scale = float(np.float32(np.abs(real).max() / 127.0))
    qv = np.clip(np.round(real / scale), -127, 127)
    return g.const(name, qv, S.TensorType.INT8, Q([scale], [0]))


def recurrent(code, options, x_shape, consts, state, hybrid=()):
    """One recurrent node: input x, constants `consts` ((name, g -> values), in input order;
    those named in `hybrid` int8 weights, the node then a hybrid one of version 2), its state
    a variable tensor `state` (name, shape), output y."""
    def build(g):
        x = g.input("x", x_shape)
        cs = [int8_weights(g, name, make(g)) if name in hybrid else g.const(name, make(g))
              for name, make in consts]
        s = state_tensor(g, *state)
        y = g.act("y", ttype=S.TensorType.FLOAT32)
        g.op(code, [x, *cs, s], [y], options, 2 if hybrid else 1)
        g.output(y)
    return build


def bias_values(n):
    return lambda g: round3(g.rng.uniform(-0.5, 0.5, size=[n]))


def rnn(act, hybrid=False):
    """RNN: batch 2, input 4, units 3, activation `act`; `hybrid`: int8 weights."""
    return recurrent(OP.RNN, ("RNNOptions", dict(fusedActivationFunction=act)), [2, 4],
                     [("w", lambda g: g.weights([3, 4], 4)),
                      ("r", lambda g: g.weights([3, 3], 3)), ("b", bias_values(3))],
                     ("h", [2, 3]), ("w", "r") if hybrid else ())


def svdf(hybrid=False):
    """SVDF: batch 2, input 3, rank 2, units 2 (4 filters), memory 3, no activation;
    `hybrid`: int8 feature and time weights."""
    return recurrent(OP.SVDF, ("SVDFOptions", dict(rank=2)), [2, 3],
                     [("wf", lambda g: g.weights([4, 3], 3)),
                      ("wt", lambda g: g.weights([4, 3], 3)), ("b", bias_values(2))],
                     ("s", [2, 12]), ("wf", "wt") if hybrid else ())


def sequence(time_major, batch, time, n):
    """The shape of a sequence tensor: [time, batch, n] when time-major, else [batch, time, n]."""
    return [time, batch, n] if time_major else [batch, time, n]


def seq_weights(g, name, shape, kind="f32"):
    """A weight matrix [units, n] of a sequence RNN: float32; float16 through DEQUANTIZE
    ("f16", the converter's float16 weights); or int8 ("i8", dynamic-range: LiteRT's hybrid
    kernel)."""
    real = g.weights(shape, shape[1])
    if kind == "f32":
        return g.const(name, real)
    if kind == "f16":
        w = g.const(name + "_f16", real.astype(np.float16), S.TensorType.FLOAT16)
        wf = g.act(name, ttype=S.TensorType.FLOAT32)
        g.op(OP.DEQUANTIZE, [w], [wf], None, 3)
        return wf
    return int8_weights(g, name, real)


def sequence_rnn(act, time_major, batch, time, size, units, weights="f32"):
    """UNIDIRECTIONAL_SEQUENCE_RNN, its hidden state h a variable tensor; the weights as
    `seq_weights` makes them."""
    def build(g):
        x = g.input("x", sequence(time_major, batch, time, size))
        w = seq_weights(g, "w", [units, size], weights)
        r = seq_weights(g, "r", [units, units], weights)
        b = g.const("b", bias_values(units)(g))
        h = state_tensor(g, "h", [batch, units])
        y = g.act("y", ttype=S.TensorType.FLOAT32)
        g.op(OP.UNIDIRECTIONAL_SEQUENCE_RNN, [x, w, r, b, h], [y],
             ("SequenceRNNOptions", dict(timeMajor=time_major, fusedActivationFunction=act)),
             2 if weights == "i8" else 1)
        g.output(y)
    return build


def lstm_weights(g, name, shape, fan_in, hybrid):
    """An LSTM weight matrix or peephole vector: float32, or int8 symmetric per-tensor for a
    hybrid LSTM."""
    w = g.weights(shape, fan_in)
    return int8_weights(g, name, w) if hybrid else g.const(name, w)


def lstm_cell_tensors(g, prefix, n_in, n_cell, n_out, cifg=False, peephole=False,
                      projection=False, hybrid=False):
    """The 17 weight, bias and projection inputs of one LSTM cell (None where omitted): gate
    order input, forget, cell, output; CIFG omits the input gate's."""
    ts = []
    for gate in range(4):
        skip = cifg and gate == 0
        ts.append(None if skip else lstm_weights(g, "%swx%d" % (prefix, gate),
                                                 [n_cell, n_in], n_in, hybrid))
    for gate in range(4):
        skip = cifg and gate == 0
        ts.append(None if skip else lstm_weights(g, "%swh%d" % (prefix, gate),
                                                 [n_cell, n_out], n_out, hybrid))
    for gate in (0, 1, 3):
        skip = not peephole or (cifg and gate == 0)
        ts.append(None if skip else lstm_weights(g, "%speep%d" % (prefix, gate), [n_cell], 2,
                                                 hybrid))
    for gate in range(4):
        skip = cifg and gate == 0
        ts.append(None if skip else g.const("%sb%d" % (prefix, gate), bias_values(n_cell)(g)))
    ts.append(lstm_weights(g, prefix + "proj_w", [n_out, n_cell], n_cell, hybrid)
              if projection else None)
    ts.append(g.const(prefix + "proj_b", bias_values(n_out)(g)) if projection else None)
    return ts


def lstm_layer_norm(g, n_cell, cifg):
    """The four layer-norm coefficients (the input gate's omitted with CIFG), near 1."""
    return [None if (cifg and gate == 0) else
            g.const("ln%d" % gate, round3(g.rng.uniform(0.5, 1.5, size=[n_cell])))
            for gate in range(4)]


def lstm(code, batch=2, steps=3, n_in=3, n_cell=4, n_out=4, act=ACT.TANH, cell_clip=0.0,
         proj_clip=0.0, cifg=False, peephole=False, projection=False, layer_norm=False,
         time_major=False, merge=True, hybrid=False):
    """One LSTM-family node over x ([batch, n_in] for LSTM, else a [batch, steps, n_in]
    sequence or [steps, batch, n_in] when time_major), its output and cell states variable
    tensors (zero, as LiteRT starts them)."""
    cell = dict(cifg=cifg, peephole=peephole, projection=projection, hybrid=hybrid)
    clips = dict(fusedActivationFunction=act, cellClip=cell_clip, projClip=proj_clip)

    def build(g):
        if code == OP.LSTM:
            x = g.input("x", [batch, n_in])
        else:
            x = g.input("x", [steps, batch, n_in] if time_major else [batch, steps, n_in])
        if code == OP.BIDIRECTIONAL_SEQUENCE_LSTM:
            ins = [x, *lstm_cell_tensors(g, "fw_", n_in, n_cell, n_out, **cell),
                   *lstm_cell_tensors(g, "bw_", n_in, n_cell, n_out, **cell)]
            ins += [state_tensor(g, name, [batch, n])
                    for name, n in (("fw_h", n_out), ("fw_c", n_cell), ("bw_h", n_out),
                                    ("bw_c", n_cell))]
            ins += [None] * 9
            outs = [g.act("y", ttype=S.TensorType.FLOAT32)] if merge else [
                g.act("fw_y", ttype=S.TensorType.FLOAT32),
                g.act("bw_y", ttype=S.TensorType.FLOAT32)]
            options = ("BidirectionalSequenceLSTMOptions",
                       dict(clips, mergeOutputs=merge, timeMajor=time_major))
            g.op(code, ins, outs, options, 2 if hybrid else 1)
            g.output(*outs)
            return
        ins = [x, *lstm_cell_tensors(g, "", n_in, n_cell, n_out, **cell),
               state_tensor(g, "h", [batch, n_out]), state_tensor(g, "c", [batch, n_cell])]
        if layer_norm:
            ins += lstm_layer_norm(g, n_cell, cifg)
        y = g.act("y", ttype=S.TensorType.FLOAT32)
        if code == OP.LSTM:
            options = ("LSTMOptions", clips)
        else:
            options = ("UnidirectionalSequenceLSTMOptions", dict(clips, timeMajor=time_major))
        # TFLite's versions of the hybrid forms: LSTM 3 (2 is the BASIC kernel), the
        # sequence forms 2.
        g.op(code, ins, [y], options, (3 if code == OP.LSTM else 2) if hybrid else 1)
        g.output(y)
    return build


def bidirectional_rnn(act, time_major, merge, batch, time, size, units, aux=None, aux_size=0,
                      hybrid=False):
    """BIDIRECTIONAL_SEQUENCE_RNN with (forward, backward) `units`, its hidden states fw_h and
    bw_h variable tensors; `aux`: None, "parallel" (the auxiliary input alone, the backward
    cell's input) or "cross" (the auxiliary input and both auxiliary weights); `hybrid`: every
    weight matrix int8."""
    kind = "i8" if hybrid else "f32"

    def build(g):
        x = g.input("x", sequence(time_major, batch, time, size))
        a = g.input("aux", sequence(time_major, batch, time, aux_size)) if aux else None
        ins = [x]
        for d, n in zip(("fw", "bw"), units):
            n_in = aux_size if d == "bw" and aux == "parallel" else size
            ins += [seq_weights(g, d + "_w", [n, n_in], kind),
                    seq_weights(g, d + "_r", [n, n], kind),
                    g.const(d + "_b", bias_values(n)(g)),
                    state_tensor(g, d + "_h", [batch, n])]
        ins.append(a)
        for d, n in zip(("fw", "bw"), units):
            ins.append(seq_weights(g, d + "_aw", [n, aux_size], kind) if aux == "cross" else None)
        outs = [g.act("y")] if merge else [g.act("fw_y"), g.act("bw_y")]
        g.op(OP.BIDIRECTIONAL_SEQUENCE_RNN, ins, outs,
             ("BidirectionalSequenceRNNOptions",
              dict(timeMajor=time_major, mergeOutputs=merge, fusedActivationFunction=act)),
             2 if hybrid else 1)
        g.output(*outs)
    return build


def small_net(g):
    """A few layers in a row (conv, depthwise, pool, fc, softmax): requantization between
    operators of one scheme."""
    x = g.input("x", [1, 8, 8, 3])
    w1 = g.filter("w1", g.weights([8, 3, 3, 3], 27), axis=0)
    b1 = g.bias("b1", 8, x, w1)
    c1 = g.act("conv")
    g.op(OP.CONV_2D, [x, w1, b1], [c1], conv_opts(SAME, 2, 1, ACT.RELU6), versions(g, 1, 3))
    w2 = g.filter("w2", g.weights([1, 3, 3, 8], 9), axis=3)
    b2 = g.bias("b2", 8, c1, w2)
    d = g.act("dw")
    g.op(OP.DEPTHWISE_CONV_2D, [c1, w2, b2], [d], dw_opts(SAME, 1, 1, 1, ACT.RELU),
         versions(g, 1, 3))
    p = g.act("pool", like=d if g.quantized else None)
    g.op(OP.AVERAGE_POOL_2D, [d], [p], pool_opts(VALID, 1, 4), versions(g, 1, 2))
    r = g.act("flat", like=p if g.quantized else None)
    g.op(OP.RESHAPE, [p, g.i32("flat_shape", [1, 8])], [r])
    w3 = g.filter("w3", g.weights([5, 8], 8), axis=None)
    b3 = g.bias("b3", 5, r, w3)
    f = g.act("logits")
    g.op(OP.FULLY_CONNECTED, [r, w3, b3], [f], ("FullyConnectedOptions", {}), versions(g, 1, 4))
    s = g.act("probs", fixed="softmax")
    g.op(OP.SOFTMAX, [f], [s], ("SoftmaxOptions", dict(beta=1.0)), versions(g, 1, 2))
    g.output(f, s)


def unsupported(code_or_custom):
    """An ADD (node 0) then an operator with no NNAPI equivalent (node 1)."""
    def build(g):
        a = g.input("a", [1, 6])
        b = g.input("b", [1, 6])
        s = g.act("sum", shape=[1, 6])
        g.op(OP.ADD, [a, b], [s], ("AddOptions", {}))
        y = g.act("y", shape=[1, 6])
        if code_or_custom == "CUMSUM":
            g.op(OP.CUMSUM, [s, g.i32("axis", [1])], [y], ("CumsumOptions", {}))
        else:
            g.op(OP.CUSTOM, [s], [y], custom=code_or_custom)
        g.output(y)
    return build


# name -> (builder, scheme, expectation). Expectation "agree", or refused(...): nnaccelctl
# exits 2 with a message that names each of `mentions`.
AGREE = "agree"
SPEC = {}


def refused(*mentions, litert_runs=True):
    return ("error", list(mentions), litert_runs)


# NNAPI has no arithmetic on 16-bit quantized activations (TFLite's 16x8 scheme): no ADD,
# CONV_2D, FULLY_CONNECTED, DEQUANTIZE or QUANTIZE takes TENSOR_QUANT16_SYMM.
def refused_16x8(op):
    return refused("16-bit quantized", op, "node 0")


# Models run on LiteRT's default path instead of the reference kernels: operators the
# reference resolver lacks (CEIL, ELU), or whose reference kernel departs from the operator's
# definition (LOCAL_RESPONSE_NORMALIZATION).
RESOLVER = {}


# Models whose float outputs cannot agree within the test's 1e-5 of the range, with the
# fraction of the range allowed instead and why.
TOLERANCE = {}
HYBRID_WHY = ("LiteRT's hybrid kernels quantize the float input to int8 on the fly (a step "
              "of max|x|/127); nnaccel computes in float with the dequantized weights. "
              "Measured on the generated inputs: 2e-3 to 4e-3 of the output's range")

HYBRID_RECURRENT_WHY = ("LiteRT's hybrid recurrent kernels quantize the float input (and, in "
                        "RNNs and LSTMs, the hidden/output state) to int8 on the fly at every "
                        "step (a step of max|v|/127 per batch row); nnaccel computes in float "
                        "with the dequantized weights. Measured on the generated inputs: 6e-4 "
                        "to 3e-3 of the output's range")

# Models where nnaccel deliberately computes f(LiteRT's output): (f, why).
THEN = {}
FUSED_TANH_WHY = ("TFLite's ADD/DIV kernels ignore a fused TANH (CalculateActivationRange "
                  "knows only RELU, RELU_N1_TO_1, RELU6); nnaccel applies it as NNAPI's "
                  "TFLite delegate does, so the test compares with tanh of LiteRT's output")


def model(name, build, schemes=("f32",), expect=AGREE, resolver="ref", tolerance=None,
          then=None):
    for scheme in schemes:
        if then is not None:
            THEN["%s_%s" % (name, scheme) if len(schemes) > 1 else name] = then
        full = name if len(schemes) == 1 and scheme in ("f32", "q") else "%s_%s" % (name, scheme)
        SPEC[full] = (build, scheme, expect)
        RESOLVER[full] = resolver
        if tolerance is not None:
            TOLERANCE[full] = tolerance


# Convolutions.
model("conv2d_same_s1_relu", conv2d(SAME, 1, act=ACT.RELU), ("f32", "u8", "i8", "i8t"))
model("conv2d_same_s1_relu", conv2d(SAME, 1, act=ACT.RELU), ("i16",), refused_16x8("CONV_2D"))
model("conv2d_valid_s2_relu6", conv2d(VALID, 2, act=ACT.RELU6), ("f32", "u8", "i8"))
model("conv2d_same_dilation2", conv2d(SAME, 1, dilation=2), ("f32", "i8"))
model("conv2d_valid_dilation2_relu_n1_to_1", conv2d(VALID, 1, dilation=2, act=ACT.RELU_N1_TO_1))
model("depthwise_m1_same_s1_relu", depthwise(SAME, 1, 1, act=ACT.RELU), ("f32", "u8", "i8"))
model("depthwise_m2_valid_s2", depthwise(VALID, 2, 2), ("f32", "u8", "i8"))
model("depthwise_m1_same_dilation2", depthwise(SAME, 1, 1, dilation=2))
model("transpose_conv_same_s2", transpose_conv(SAME, 2), ("f32", "u8", "i8"))
model("transpose_conv_valid_s1_nobias", transpose_conv(VALID, 1, bias=False))
model("fully_connected_relu", fully_connected([2, 16], 8, act=ACT.RELU), ("f32", "u8", "i8"))
model("fully_connected_relu", fully_connected([2, 16], 8, act=ACT.RELU), ("i16",),
      refused_16x8("FULLY_CONNECTED"))
model("fully_connected_keep_num_dims", fully_connected([1, 3, 16], 8, keep_num_dims=True),
      ("f32", "i8"))
model("fully_connected_nobias", fully_connected([3, 10], 5, bias=False), ("f32", "i8"))
model("fully_connected_3d_flattened", fully_connected([2, 3, 8], 4))
# Pools.
model("average_pool_same_s2", pool(OP.AVERAGE_POOL_2D, SAME, 2, 3), ("f32", "u8", "i8"))
model("max_pool_valid_s2_relu", pool(OP.MAX_POOL_2D, VALID, 2, 2, ACT.RELU), ("f32", "u8", "i8"))
model("l2_pool_same_s1", pool(OP.L2_POOL_2D, SAME, 1, 2))
# Element-wise arithmetic with fused activations.
model("add_relu", binary(OP.ADD, "AddOptions", ACT.RELU), ("f32", "u8", "i8"))
model("add_relu", binary(OP.ADD, "AddOptions", ACT.RELU), ("i16",), refused_16x8("ADD"))
# TFLite's kernels leave a fused TANH out (their activation range knows only the RELU
# family); nnaccel applies it as NNAPI's delegate does: the test takes tanh of LiteRT's output.
model("add_tanh", binary(OP.ADD, "AddOptions", ACT.TANH), then=("tanh", FUSED_TANH_WHY))
model("sub_relu6", binary(OP.SUB, "SubOptions", ACT.RELU6), ("f32", "u8", "i8"))
model("mul_relu_n1_to_1", binary(OP.MUL, "MulOptions", ACT.RELU_N1_TO_1), ("f32", "u8", "i8"))
model("mul_same_shape", binary(OP.MUL, "MulOptions", b_shape=(1, 3, 3, 4)), ("f32", "i8"))
model("div_relu", binary(OP.DIV, "DivOptions", ACT.RELU, b_range=(0.5, 2.0)))
model("div_tanh", binary(OP.DIV, "DivOptions", ACT.TANH, b_range=(0.5, 2.0)),
      then=("tanh", FUSED_TANH_WHY))
model("concatenation", concatenation, ("f32", "u8", "i8"))
# Shapes and data movement.
model("reshape", with_consts(OP.RESHAPE, [("shape", [1, 20, 3])], version=(1, 1, 1)), ("f32", "u8", "i8"))
model("reshape_new_shape_option", reshape_by_option)
model("squeeze", with_consts(OP.SQUEEZE, [], ("SqueezeOptions", dict(squeezeDims=[0, 2])),
                             shape=(1, 4, 1, 3), version=(1, 1, 1)), ("f32", "i8"))
model("squeeze_all", with_consts(OP.SQUEEZE, [], ("SqueezeOptions", {}), shape=(1, 5, 1, 1)))
model("expand_dims", with_consts(OP.EXPAND_DIMS, [("axis", [2])], ("ExpandDimsOptions", {}),
                                 version=(1, 1, 1)),
      ("f32", "i8"))
model("expand_dims_negative_axis", with_consts(OP.EXPAND_DIMS, [("axis", [-1])],
                                               ("ExpandDimsOptions", {})))
model("split", with_consts(OP.SPLIT, [("axis", [3])], ("SplitOptions", dict(numSplits=3)),
                           outputs=3, const_first=True, shape=(1, 2, 2, 6)), ("f32", "i8"))
model("split_v", with_consts(OP.SPLIT_V, [("sizes", [1, 3, -1]), ("axis", [1])],
                             ("SplitVOptions", dict(numSplits=3)), outputs=3,
                             shape=(2, 6, 3)), ("f32", "i8"))
model("strided_slice", with_consts(
    OP.STRIDED_SLICE, [("begin", [0, 1, 0, 0]), ("end", [1, 4, 5, 2]), ("strides", [1, 2, 2, 1])],
    ("StridedSliceOptions", dict(beginMask=0, endMask=0))), ("f32", "i8"))
model("strided_slice_masks", with_consts(
    OP.STRIDED_SLICE, [("begin", [0, -3, 1, 0]), ("end", [1, 0, 4, 3]), ("strides", [1, 1, 1, 1])],
    ("StridedSliceOptions", dict(beginMask=1, endMask=2, shrinkAxisMask=1))))
model("pad", with_consts(OP.PAD, [("paddings", [[0, 0], [1, 2], [2, 1], [0, 0]])],
                         ("PadOptions", {})), ("f32", "u8", "i8"))
model("transpose", with_consts(OP.TRANSPOSE, [("perm", [0, 3, 1, 2])], ("TransposeOptions", {})),
      ("f32", "i8"))
model("gather_axis1", with_consts(OP.GATHER, [("indices", [3, 0, 2, 2])],
                                  ("GatherOptions", dict(axis=1))), ("f32", "i8"))
model("gather_axis0_2d_indices", with_consts(OP.GATHER, [("indices", [[1, 0], [2, 1]])],
                                             ("GatherOptions", dict(axis=0)), shape=(3, 4)))
# Reductions, normalisation and activations.
model("mean_keep_dims", with_consts(OP.MEAN, [("axes", [1, 2])],
                                    ("ReducerOptions", dict(keepDims=True)), same=False),
      ("f32", "u8", "i8"))
model("mean_no_keep_dims", with_consts(OP.MEAN, [("axes", [2])],
                                       ("ReducerOptions", dict(keepDims=False)), same=False),
      ("f32", "i8"))
model("softmax", unary(OP.SOFTMAX, ("SoftmaxOptions", dict(beta=1.0)), fixed="softmax",
                       shape=(2, 10)), ("f32", "u8", "i8"))
model("softmax_beta_half", unary(OP.SOFTMAX, ("SoftmaxOptions", dict(beta=0.5)), shape=(3, 7)))
model("logistic", unary(OP.LOGISTIC, fixed="logistic"), ("f32", "u8", "i8"))
model("tanh", unary(OP.TANH, fixed="tanh"), ("f32", "u8", "i8"))
model("relu", unary(OP.RELU), ("f32", "i8"))
model("relu6", unary(OP.RELU6), ("f32", "i8"))
model("leaky_relu", unary(OP.LEAKY_RELU, ("LeakyReluOptions", dict(alpha=0.2))),
      ("f32", "u8", "i8"))
model("hard_swish", unary(OP.HARD_SWISH, ("HardSwishOptions", {}), version=(1, 1, 1)), ("f32", "u8", "i8"))
model("resize_bilinear", with_consts(OP.RESIZE_BILINEAR, [("size", [7, 9])],
                                     ("ResizeBilinearOptions", {})), ("f32", "i8"))
model("resize_bilinear_half_pixel", with_consts(
    OP.RESIZE_BILINEAR, [("size", [8, 6])], ("ResizeBilinearOptions",
                                             dict(halfPixelCenters=True))), ("f32", "i8"))
model("resize_bilinear_align_corners", with_consts(
    OP.RESIZE_BILINEAR, [("size", [7, 9])], ("ResizeBilinearOptions", dict(alignCorners=True))))
# Element-wise math, comparisons and logic.
X = ("x", [1, 3, 4, 3], -2.0, 2.0)
POS = ("x", [1, 3, 4, 3], 0.1, 4.0)
AB = [("a", [1, 3, 4, 3], -2.0, 2.0), ("b", [1, 1, 4, 3], -2.0, 2.0)]
BOOLS = [("a", [2, 5], 0, 1, BOOL), ("b", [2, 5], 0, 1, BOOL)]
model("relu_n1_to_1", generic(OP.RELU_N1_TO_1, [X], [("y", "same")]))
model("relu_0_to_1", generic(OP.RELU_0_TO_1, [X], [("y", "same")]))
model("elu", generic(OP.ELU, [X], version=(1, 1, 1)), ("f32", "i8"), resolver="default")
model("abs", generic(OP.ABS, [X], [("y", "same")]))
model("neg", generic(OP.NEG, [X]))
model("exp", generic(OP.EXP, [X]))
model("log", generic(OP.LOG, [POS]))
model("sqrt", generic(OP.SQRT, [POS]))
model("rsqrt", generic(OP.RSQRT, [POS]))
model("sin", generic(OP.SIN, [X]))
model("cos", generic(OP.COS, [X]))
model("gelu", generic(OP.GELU, [("x", [2, 12], -4.0, 4.0)], options=("GeluOptions", {})))
model("gelu_approximate", generic(OP.GELU, [("x", [2, 12], -4.0, 4.0)],
                                  options=("GeluOptions", dict(approximate=True))))
model("square", generic(OP.SQUARE, [X]))
model("floor", generic(OP.FLOOR, [X]))
model("ceil", generic(OP.CEIL, [X]), resolver="default")
model("log_softmax", generic(OP.LOG_SOFTMAX, [("x", [2, 8], -3.0, 3.0)],
                             options=("LogSoftmaxOptions", {})))
# TFLite's quantized MAXIMUM/MINIMUM compare and copy the raw integers, so their output must
# share the inputs' quantization (as the converter writes it) to mean anything.
model("maximum", generic(OP.MAXIMUM, AB, [("y", "same")]), ("f32", "i8"))
model("minimum", generic(OP.MINIMUM, AB, [("y", "same")]), ("f32", "i8"))
model("pow", generic(OP.POW, [("a", [2, 6], 0.5, 2.0), ("b", [2, 6], -2.0, 2.0)]))
model("squared_difference", generic(OP.SQUARED_DIFFERENCE, AB))
# Floor division and modulo, with divisors of both signs.
model("floor_div_i32", generic(OP.FLOOR_DIV, [("a", [3, 4], -20, 20, INT32),
                                              ("@b", [[3, -2, 5, -4]])],
                               [("y", INT32)], ("FloorDivOptions", {})))
model("floor_mod_i32", generic(OP.FLOOR_MOD, [("a", [3, 4], -20, 20, INT32),
                                              ("@b", [[3, -2, 5, -4]])],
                               [("y", INT32)], ("FloorModOptions", {})))
model("floor_div_f32", generic(OP.FLOOR_DIV, [("a", [2, 3], -3.0, 3.0),
                                              ("=b", [[0.7, -1.3, 2.1]])],
                               options=("FloorDivOptions", {})))
model("floor_mod_f32", generic(OP.FLOOR_MOD, [("a", [2, 3], -3.0, 3.0),
                                              ("=b", [[0.7, -1.3, 2.1]])],
                               options=("FloorModOptions", {})))
model("prelu", generic(OP.PRELU, [X, ("=alpha", [[[0.1, 0.25, -0.5]]])]))
model("add_n", generic(OP.ADD_N, [("a", [2, 5]), ("b", [2, 5]), ("c", [2, 5])]))
for op in ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"):
    # One decimal: equal pairs occur.
    model(op.lower(), generic(getattr(OP, op), [("a", [3, 4], -2, 2, INT32),
                                                ("b", [3, 4], -2, 2, INT32)], [("y", BOOL)]))
model("greater_float", generic(OP.GREATER, AB, [("y", BOOL)]))
model("logical_not", generic(OP.LOGICAL_NOT, BOOLS[:1], [("y", BOOL)]))
model("logical_and", generic(OP.LOGICAL_AND, BOOLS, [("y", BOOL)]))
model("logical_or", generic(OP.LOGICAL_OR, BOOLS, [("y", BOOL)]))
model("select", generic(OP.SELECT, [("cond", [2, 5], 0, 1, BOOL), ("a", [2, 5]),
                                    ("b", [2, 5])]))
model("select_v2", generic(OP.SELECT_V2, [("cond", [2, 5], 0, 1, BOOL), ("a", [2, 5]),
                                          ("b", [2, 5])]))
# NNAPI's SELECT does not broadcast; the import says so.
model("select_v2_broadcast", generic(OP.SELECT_V2, [("cond", [1, 5], 0, 1, BOOL),
                                                    ("a", [2, 5]), ("b", [2, 1])]),
      expect=refused("SELECT_V2", "node 0"))
model("cast_f32_to_i32", generic(OP.CAST, [("x", [2, 6], -5.0, 5.0)], [("y", INT32)],
                                 ("CastOptions", dict(inDataType=FLOAT32, outDataType=INT32))))
model("cast_i32_to_f32", generic(OP.CAST, [("x", [2, 6], -100, 100, INT32)], [("y", FLOAT32)],
                                 ("CastOptions", dict(inDataType=INT32, outDataType=FLOAT32))))
# Reductions.
R4 = ("x", [2, 3, 4, 2], -2.0, 2.0)
for op, opt_same in (("SUM", False), ("REDUCE_MAX", True), ("REDUCE_MIN", True)):
    model(op.lower(), generic(getattr(OP, op), [R4, ("@axes", [1, 3])],
                              [("y", "same") if opt_same else "y"],
                              ("ReducerOptions", dict(keepDims=False))),
          ("f32", "i8") if opt_same else ("f32",))
model("reduce_prod", generic(OP.REDUCE_PROD, [("x", [2, 3, 4], 0.5, 1.5), ("@axes", [2])],
                             options=("ReducerOptions", dict(keepDims=True))))
model("reduce_any", generic(OP.REDUCE_ANY, [("x", [6, 2], 0, 1, BOOL), ("@axes", [1])],
                            [("y", BOOL)], ("ReducerOptions", {})))
model("reduce_all", generic(OP.REDUCE_ALL, [("x", [3, 2], 0, 1, BOOL), ("@axes", [1])],
                            [("y", BOOL)], ("ReducerOptions", {})))
model("arg_max", generic(OP.ARG_MAX, [R4, ("@axis", [3])], [("y", INT32)],
                         ("ArgMaxOptions", dict(outputType=INT32))), ("f32", "i8"))
model("arg_min", generic(OP.ARG_MIN, [R4, ("@axis", [1])], [("y", INT32)],
                         ("ArgMinOptions", dict(outputType=INT32))))
model("topk_v2", generic(OP.TOPK_V2, [("x", [2, 9]), ("@k", 3)],
                         [("values", "same"), ("indices", INT32)], ("TopKV2Options", {})),
      ("f32", "i8"))
# More data movement.
IMG = ("x", [1, 4, 6, 2])
model("pack", generic(OP.PACK, [("a", [2, 3]), ("b", [2, 3])], [("y", "same")],
                      ("PackOptions", dict(valuesCount=2, axis=1))), ("f32", "i8"))
model("unpack", generic(OP.UNPACK, [("x", [2, 3, 2])], [("y0", "same"), ("y1", "same"),
                                                        ("y2", "same")],
                        ("UnpackOptions", dict(num=3, axis=1))), ("f32", "i8"))
model("slice", generic(OP.SLICE, [IMG, ("@begin", [0, 1, 2, 0]), ("@size", [1, 2, -1, 1])],
                       [("y", "same")], ("SliceOptions", {})), ("f32", "i8"))
model("tile", generic(OP.TILE, [("x", [2, 3]), ("@multiples", [2, 3])], [("y", "same")],
                      ("TileOptions", {})))
model("space_to_batch_nd", generic(OP.SPACE_TO_BATCH_ND, [
    IMG, ("@block", [2, 2]), ("@paddings", [[0, 0], [1, 1]])], [("y", "same")],
    ("SpaceToBatchNDOptions", {})), ("f32", "i8"))
model("batch_to_space_nd", generic(OP.BATCH_TO_SPACE_ND, [
    ("x", [4, 2, 3, 2]), ("@block", [2, 2]), ("@crops", [[0, 0], [0, 0]])], [("y", "same")],
    ("BatchToSpaceNDOptions", {})), ("f32", "i8"))
model("space_to_depth", generic(OP.SPACE_TO_DEPTH, [IMG], [("y", "same")],
                                ("SpaceToDepthOptions", dict(blockSize=2))), ("f32", "i8"))
model("depth_to_space", generic(OP.DEPTH_TO_SPACE, [("x", [1, 2, 3, 8])], [("y", "same")],
                                ("DepthToSpaceOptions", dict(blockSize=2)), version=(1, 1, 1)),
      ("f32", "i8"))
model("pad_v2", generic(OP.PADV2, [IMG, ("@paddings", [[0, 0], [2, 0], [1, 1], [0, 0]]),
                                   ("=value", [0.5])], options=("PadV2Options", {})))
model("mirror_pad_reflect", generic(OP.MIRROR_PAD, [IMG, ("@paddings", [[0, 0], [1, 2], [2, 1],
                                                                      [0, 0]])],
                                    [("y", "same")], ("MirrorPadOptions", dict(mode=0))),
      ("f32", "i8"))
model("mirror_pad_symmetric", generic(OP.MIRROR_PAD, [IMG, ("@paddings", [[0, 0], [2, 2],
                                                                          [0, 2], [0, 0]])],
                                      [("y", "same")], ("MirrorPadOptions", dict(mode=1))))
model("reverse_v2", generic(OP.REVERSE_V2, [IMG, ("@axes", [1, 2])], [("y", "same")],
                            ("ReverseV2Options", {})), ("f32", "i8"))
model("resize_nearest_neighbor", generic(OP.RESIZE_NEAREST_NEIGHBOR, [IMG, ("@size", [7, 9])],
                                         [("y", "same")], ("ResizeNearestNeighborOptions", {})),
      ("f32", "i8"))
model("embedding_lookup", generic(OP.EMBEDDING_LOOKUP, [
    ("ids", [4], 0, 4, INT32), ("=table", round3(np.linspace(-1, 1, 15)).reshape(5, 3))]))
model("fill", fill_then_add)
model("hashtable_lookup", generic(OP.HASHTABLE_LOOKUP, [
    ("lookup", [6], 0, 10, INT32), ("@keys", [2, 4, 5, 7, 9]),
    ("=values", round3(np.linspace(-2, 2, 10)).reshape(5, 2))],
    [("y", FLOAT32), ("hits", S.TensorType.UINT8)]))
model("batch_matmul", generic(OP.BATCH_MATMUL, [
    ("x", [2, 3, 4]), ("=rhs", round3(np.linspace(-1, 1, 20)).reshape(4, 5))],
    options=("BatchMatMulOptions", {})), ("f32",))
model("batch_matmul_adj_y", generic(OP.BATCH_MATMUL, [
    ("x", [3, 4]), ("=rhs", round3(np.linspace(1, -1, 24)).reshape(6, 4))],
    options=("BatchMatMulOptions", dict(adjY=True))))
# Normalisations.
model("l2_normalization", generic(OP.L2_NORMALIZATION, [X], options=("L2NormOptions", {})))
# TFLite's reference LRN kernel sums the window [c - radius, c + radius) (its end exclusive);
# the optimized kernel LiteRT runs by default, and NNAPI, sum [c - radius, c + radius].
model("local_response_normalization", generic(
    OP.LOCAL_RESPONSE_NORMALIZATION, [("x", [1, 2, 2, 6])],
    options=("LocalResponseNormalizationOptions", dict(radius=2, bias=1.0, alpha=0.5,
                                                       beta=0.75))),
      resolver="default")
# Hybrid (dynamic-range) weights; control flow.
model("hybrid_fully_connected", hybrid("fc"), ("q",), tolerance=(1e-2, HYBRID_WHY))
model("hybrid_conv2d", hybrid("conv"), ("q",), tolerance=(1e-2, HYBRID_WHY))
model("hybrid_depthwise_m2", hybrid("dw"), ("q",), tolerance=(1e-2, HYBRID_WHY))
model("if_then", if_model(True), ("q",))
model("if_else", if_model(False), ("q",))
model("while_loop", while_model(False), ("q",))
model("while_loop_input_passed_twice", while_model(True), ("q",))
model("while_loop_no_passthrough", while_model(False, passthrough=False), ("q",))
# Quantization.
model("quantize_f32_to_i8", quantize_model("f32", "i8"), ("q",))
model("quantize_f32_to_u8", quantize_model("f32", "u8"), ("q",))
model("quantize_i8_requantize", quantize_model("i8", "i8"), ("q",))
model("dequantize_i8_input", dequantize_input, ("q",))
model("dequantize_f16_weights", dequantized_weights("f16"), ("q",))
model("dequantize_i8_weights", dequantized_weights("i8"), ("q",))
model("dequantize_i8_per_channel_weights", dequantized_weights("i8pc"), ("q",))
model("densify_sparse_weights", densify, ("q",))
# Resource variables, networks.
model("variables_call_once", variables, ("q",))
model("small_net", small_net, ("f32", "u8", "i8"))
# Recurrent builtins: the state a variable tensor (a state input and output in nnaccel).
model("rnn_relu", rnn(ACT.RELU))
model("rnn_tanh", rnn(ACT.TANH))
model("svdf_rank2", svdf())
model("unidirectional_sequence_rnn_relu", sequence_rnn(ACT.RELU, False, 2, 3, 3, 4))
model("unidirectional_sequence_rnn_tanh_time_major", sequence_rnn(ACT.TANH, True, 1, 2, 4, 3))
model("unidirectional_sequence_rnn_f16_weights", sequence_rnn(ACT.TANH, True, 2, 2, 2, 3, "f16"),
      ("q",))
model("unidirectional_sequence_rnn_hybrid", sequence_rnn(ACT.NONE, False, 1, 2, 3, 2, "i8"),
      tolerance=(1e-2, HYBRID_RECURRENT_WHY))
model("bidirectional_sequence_rnn_merged_tanh",
      bidirectional_rnn(ACT.TANH, True, True, 2, 3, 3, (2, 3)))
model("bidirectional_sequence_rnn_separate_relu",
      bidirectional_rnn(ACT.RELU, False, False, 1, 3, 2, (3, 2)))
model("bidirectional_sequence_rnn_cross_aux",
      bidirectional_rnn(ACT.TANH, False, True, 2, 2, 3, (2, 2), "cross", 2))
model("bidirectional_sequence_rnn_cross_aux_time_major",
      bidirectional_rnn(ACT.RELU, True, False, 1, 3, 2, (2, 3), "cross", 2))
model("bidirectional_sequence_rnn_parallel_aux",
      bidirectional_rnn(ACT.TANH, True, False, 2, 2, 3, (2, 2), "parallel", 3))
# LiteRT's batch-major kernel runs the backward cell on the input and ignores a parallel
# auxiliary input (NNAPI reads it): no mapping gives LiteRT's result, so it is refused.
model("bidirectional_sequence_rnn_parallel_aux_batch_major",
      bidirectional_rnn(ACT.TANH, False, True, 2, 2, 3, (2, 2), "parallel", 3),
      expect=refused("BIDIRECTIONAL_SEQUENCE_RNN", "node 0", "batch-major"))
# The LSTM family (float32): output and cell state variable tensors.
model("lstm_tanh", lstm(OP.LSTM))
model("lstm_cifg_relu", lstm(OP.LSTM, act=ACT.RELU, cifg=True))
model("lstm_relu_n1_to_1", lstm(OP.LSTM, batch=1, act=ACT.RELU_N1_TO_1))
model("lstm_peephole_projection_clip", lstm(OP.LSTM, n_out=3, peephole=True, projection=True,
                                            cell_clip=0.4, proj_clip=0.4))
model("lstm_layer_norm", lstm(OP.LSTM, batch=1, layer_norm=True, peephole=True))
model("lstm_layer_norm_cifg", lstm(OP.LSTM, layer_norm=True, cifg=True))
model("unidirectional_sequence_lstm", lstm(OP.UNIDIRECTIONAL_SEQUENCE_LSTM))
model("unidirectional_sequence_lstm_time_major_cifg_peephole",
      lstm(OP.UNIDIRECTIONAL_SEQUENCE_LSTM, time_major=True, cifg=True, peephole=True))
model("unidirectional_sequence_lstm_projection_layer_norm",
      lstm(OP.UNIDIRECTIONAL_SEQUENCE_LSTM, batch=1, n_out=2, projection=True,
           layer_norm=True))
model("bidirectional_sequence_lstm_merged", lstm(OP.BIDIRECTIONAL_SEQUENCE_LSTM))
model("bidirectional_sequence_lstm_separate_time_major",
      lstm(OP.BIDIRECTIONAL_SEQUENCE_LSTM, merge=False, time_major=True, steps=2))
# Hybrid (dynamic-range) recurrent layers: float input, int8 weights.
model("lstm_hybrid_int8_weights", lstm(OP.LSTM, hybrid=True), tolerance=(1e-2, HYBRID_RECURRENT_WHY))
model("lstm_hybrid_peephole_projection",
      lstm(OP.LSTM, n_out=3, peephole=True, projection=True, hybrid=True),
      tolerance=(1e-2, HYBRID_RECURRENT_WHY))
model("unidirectional_sequence_lstm_hybrid",
      lstm(OP.UNIDIRECTIONAL_SEQUENCE_LSTM, peephole=True, hybrid=True),
      tolerance=(1e-2, HYBRID_RECURRENT_WHY))
model("bidirectional_sequence_lstm_hybrid", lstm(OP.BIDIRECTIONAL_SEQUENCE_LSTM, hybrid=True),
      tolerance=(1e-2, HYBRID_RECURRENT_WHY))
model("rnn_hybrid", rnn(ACT.TANH, hybrid=True), tolerance=(1e-2, HYBRID_RECURRENT_WHY))
model("svdf_rank2_hybrid", svdf(hybrid=True), tolerance=(1e-2, HYBRID_RECURRENT_WHY))
model("bidirectional_sequence_rnn_hybrid_cross_aux",
      bidirectional_rnn(ACT.TANH, False, True, 2, 2, 3, (2, 2), "cross", 3, hybrid=True),
      tolerance=(1e-2, HYBRID_RECURRENT_WHY))
# LiteRT 2.3's hybrid BIDIRECTIONAL_SEQUENCE_RNN kernel runs a time-major sequence once per
# time step (its hidden states carried across the repeats), and steps through a batch-major
# auxiliary input by the input's size: no mapping gives its result, so both are refused.
model("bidirectional_sequence_rnn_hybrid_time_major",
      bidirectional_rnn(ACT.RELU, True, False, 1, 3, 2, (2, 3), hybrid=True),
      expect=refused("BIDIRECTIONAL_SEQUENCE_RNN", "node 0", "hybrid", "time-major"))
model("bidirectional_sequence_rnn_hybrid_cross_aux_sizes",
      bidirectional_rnn(ACT.TANH, False, True, 2, 2, 3, (2, 2), "cross", 2, hybrid=True),
      expect=refused("BIDIRECTIONAL_SEQUENCE_RNN", "node 0", "hybrid", "auxiliary"))
# What nnaccel refuses: an operator with no NNAPI equivalent, and a custom operator.
model("unsupported_cumsum", unsupported("CUMSUM"), expect=refused("CUMSUM", "node 1"))
model("unsupported_custom", unsupported("NnaccelTestOp"),
      expect=refused("NnaccelTestOp", "node 1", litert_runs=False))


# --- building ---------------------------------------------------------------------------------


def litert(content, keep_all, resolver):
    import warnings
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    # Keeping every tensor is what the calibration wants; LiteRT warns about it.
    warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors")
    kind = OpResolverType.BUILTIN_REF if resolver == "ref" else OpResolverType.AUTO
    it = Interpreter(model_content=content, num_threads=1, experimental_op_resolver_type=kind,
                     experimental_preserve_all_tensors=keep_all)
    it.allocate_tensors()
    return it


def calibrate(g):
    """Runs the first build on LiteRT: every tensor's shape and (min, max) by name."""
    it = litert(g.to_bytes(), True, RESOLVER[g.name])
    for d in it.get_input_details():
        it.set_tensor(d["index"], g.feeds[d["name"]])
    it.invoke()
    shapes, ranges = {}, {}
    for d in it.get_tensor_details():
        try:
            v = it.get_tensor(d["index"])
        except ValueError:
            continue  # resource tensors
        shapes[d["name"]] = [int(s) for s in v.shape]
        if v.size and v.dtype.kind == "f":
            ranges[d["name"]] = (float(v.min()), float(v.max()))
    return shapes, ranges


def build(name):
    """The model `name`: built in float32, calibrated on LiteRT, built in its scheme. The
    explicitly typed models ("q": their functions give every type) are built in the float
    scheme, which leaves their types alone; a custom operator LiteRT cannot run gives its
    shapes by hand and is not calibrated."""
    fn, scheme, expect = SPEC[name]
    scheme = "f32" if scheme == "q" else scheme
    shapes, ranges = {}, {}
    if expect == AGREE or expect[2]:
        first = G(name, "f32")
        fn(first)
        shapes, ranges = calibrate(first)
    g = G(name, scheme, shapes, ranges)
    fn(g)
    return g


def npz_bytes(arrays):
    """A .npz archive of `arrays` (name -> ndarray, in order) with fixed member dates."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, a in arrays.items():
            body = io.BytesIO()
            np.lib.format.write_array(body, np.ascontiguousarray(a), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            z.writestr(info, body.getvalue())
    return out.getvalue()


def check_runs(name, g, content):
    """The final model runs on LiteRT and its outputs vary (a test on constant outputs would
    prove little)."""
    it = litert(content, False, RESOLVER[name])
    for d in it.get_input_details():
        it.set_tensor(d["index"], g.feeds[d["name"]])
    it.invoke()
    # Every tensor of the main subgraph has in the file the shape LiteRT gives it (the
    # import reads the file's shapes).
    for d in it.get_tensor_details():
        if d["index"] >= len(g.subs[0].tensors):
            continue  # a kernel's own temporaries
        t = g.subs[0].tensors[d["index"]]
        if [int(x) for x in d["shape"]] != t.shape:
            raise ValueError("tensor %s: shape %s in the file, %s on LiteRT"
                             % (t.name, t.shape, list(d["shape"])))
    for d in it.get_output_details():
        v = it.get_tensor(d["index"])
        if v.size > 1 and len(np.unique(v)) < 2:
            raise SystemExit("%s: output %s is constant (%s)" % (name, d["name"], v.ravel()[:4]))


def write(path, data):
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def generate(out, names):
    os.makedirs(out, exist_ok=True)
    manifest, failed = [], []
    for name in sorted(SPEC):
        fn, scheme, expect = SPEC[name]
        try:
            g = build(name)
            content = g.to_bytes()
            if expect == AGREE or expect[2]:
                check_runs(name, g, content)
        except (RuntimeError, ValueError) as e:
            failed.append("%s: %s" % (name, str(e).strip().replace("\n", " ")))
            continue
        if name in names:
            write(os.path.join(out, name + ".tflite"), content)
            write(os.path.join(out, name + ".inputs.npz"), npz_bytes(g.feeds))
        entry = {"name": name, "scheme": {"q": "mixed"}.get(scheme, scheme),
                 "operators": g.ops_used, "inputs": list(g.feeds),
                 "resolver": RESOLVER[name]}
        if name in THEN:
            entry["litert_then"], entry["why"] = THEN[name]
        if name in TOLERANCE:
            entry["float_tolerance"], entry["why"] = TOLERANCE[name]
        if expect == AGREE:
            entry["expect"] = "agree"
        else:
            entry["expect"] = "error"
            entry["mentions"] = expect[1]
        manifest.append(entry)
    if failed:
        raise SystemExit("gen_test_models.py: LiteRT cannot run these models:\n  "
                         + "\n  ".join(failed))
    text = json.dumps({"generator": "scripts/tflite/gen_test_models.py", "models": manifest},
                      indent=1) + "\n"
    write(os.path.join(out, "manifest.json"), text.encode())


def check(out):
    """Regenerates into a temporary directory and compares with `out`."""
    tmp = tempfile.mkdtemp(prefix="nnaccel-tflite-models-")
    try:
        generate(tmp, set(SPEC))
        ours = sorted(os.listdir(tmp))
        theirs = sorted(f for f in os.listdir(out) if not f.startswith("cli_"))
        bad = sorted(set(ours) ^ set(theirs))
        bad += [f for f in ours if f in theirs and
                not filecmp.cmp(os.path.join(tmp, f), os.path.join(out, f), shallow=False)]
        if bad:
            print("gen_test_models.py --check: these differ from what the generator writes "
                  "(rerun it): %s" % ", ".join(sorted(set(bad))), file=sys.stderr)
            return 1
        print("gen_test_models.py --check: %d files as generated" % len(ours), file=sys.stderr)
        return 0
    finally:
        shutil.rmtree(tmp)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    p.add_argument("--check", action="store_true",
                   help="compare the files in --out with a fresh build instead of writing")
    p.add_argument("--list", action="store_true", help="list the model names")
    p.add_argument("names", nargs="*", help="models to write (default: all)")
    a = p.parse_args()
    if a.list:
        print("\n".join(sorted(SPEC)))
        return 0
    if a.check:
        return check(a.out)
    unknown = [n for n in a.names if n not in SPEC]
    if unknown:
        p.error("unknown model %s (--list shows them)" % ", ".join(unknown))
    generate(a.out, set(a.names or SPEC))
    return 0


if __name__ == "__main__":
    sys.exit(main())
