#!/usr/bin/env python3
"""Writes the small .tflite models that tests/nnaccelctl.rs runs through `nnaccelctl`, into
tests/data/tflite/cli_*.tflite, with the flatbuffers schema module that ships in the
ai-edge-litert wheel (object API). Run with the LiteRT venv's python (scripts/litert-venv.sh):

    target/litert-venv/bin/python3 driver/cli/testdata/gen_tflite.py

- cli_add_mul.tflite: inputs 'x', 'y' float32 [1, 2, 2, 1]; 'sum' = RELU(x + y) (ADD with a
  fused RELU) and 'scaled' = x * c with the constant c = [0.5, 1, 2, -1]; the outputs are
  listed 'scaled' first, so output order and node order differ.
- cli_unsupported.tflite: 'x' float32 [4]; node 0 ADD(x, x), node 1 a CUSTOM operator
  'NnaccelNoSuchOp', node 2 RFFT2D (no NNAPI equivalent) — import must name nodes 1 and 2.
- cli_state.tflite: a resource variable 'acc' float32 [1, 4] initialised to [1, 2, 3, 4] by
  CALL_ONCE's init subgraph; 'y' = x + acc, then acc := y.

The expected values in the tests are worked out by hand from these definitions."""

import os

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as S

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OUT = os.path.join(ROOT, "tests", "data", "tflite")
OP = S.BuiltinOperator


class Model:
    def __init__(self):
        self.buffers = [S.BufferT()]
        self.codes = []
        self.subgraphs = []

    def code(self, builtin, custom=None):
        key = (builtin, custom)
        for k, c in enumerate(self.codes):
            if (c.builtinCode, c.customCode) == key:
                return k
        oc = S.OperatorCodeT()
        oc.builtinCode = builtin
        oc.deprecatedBuiltinCode = min(builtin, 127)
        oc.customCode = custom
        oc.version = 1
        self.codes.append(oc)
        return len(self.codes) - 1

    def write(self, name, description):
        m = S.ModelT()
        m.version = 3
        m.description = description
        m.operatorCodes, m.subgraphs, m.buffers = self.codes, self.subgraphs, self.buffers
        b = flatbuffers.Builder(1 << 12)
        b.Finish(m.Pack(b), file_identifier=b"TFL3")
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes(b.Output()))


class Sub:
    def __init__(self, model, name):
        self.model = model
        self.sg = S.SubGraphT()
        self.sg.name = name
        self.sg.tensors, self.sg.operators, self.sg.inputs, self.sg.outputs = [], [], [], []
        model.subgraphs.append(self.sg)

    def tensor(self, name, shape, ttype=S.TensorType.FLOAT32, data=None):
        t = S.TensorT()
        t.name, t.shape, t.type, t.buffer = name, list(shape), ttype, 0
        if data is not None:
            buf = S.BufferT()
            buf.data = list(np.asarray(data).tobytes())
            self.model.buffers.append(buf)
            t.buffer = len(self.model.buffers) - 1
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def op(self, builtin, inputs, outputs, options=None, custom=None):
        o = S.OperatorT()
        o.opcodeIndex = self.model.code(builtin, custom)
        o.inputs, o.outputs = list(inputs), list(outputs)
        if options is not None:
            kind, fields = options
            o.builtinOptionsType = getattr(S.BuiltinOptions, kind)
            o.builtinOptions = getattr(S, kind + "T")()
            for k, v in fields.items():
                setattr(o.builtinOptions, k, v)
        if custom is not None:
            o.customOptions = []
        self.sg.operators.append(o)


def add_mul():
    m = Model()
    g = Sub(m, "main")
    x = g.tensor("x", [1, 2, 2, 1])
    y = g.tensor("y", [1, 2, 2, 1])
    c = g.tensor("c", [1, 2, 2, 1], data=np.array([0.5, 1, 2, -1], dtype="<f4"))
    s = g.tensor("sum", [1, 2, 2, 1])
    p = g.tensor("scaled", [1, 2, 2, 1])
    g.op(OP.ADD, [x, y], [s], ("AddOptions", dict(fusedActivationFunction=S.ActivationFunctionType.RELU)))
    g.op(OP.MUL, [x, c], [p], ("MulOptions", dict(fusedActivationFunction=S.ActivationFunctionType.NONE)))
    g.sg.inputs, g.sg.outputs = [x, y], [p, s]
    m.write("cli_add_mul.tflite", "nnaccelctl test: sum = relu(x + y), scaled = x * c")


def unsupported():
    m = Model()
    g = Sub(m, "main")
    x = g.tensor("x", [4])
    a = g.tensor("a", [4])
    b = g.tensor("b", [4])
    c = g.tensor("c", [4])
    g.op(OP.ADD, [x, x], [a], ("AddOptions", dict(fusedActivationFunction=S.ActivationFunctionType.NONE)))
    g.op(OP.CUSTOM, [a], [b], custom="NnaccelNoSuchOp")
    g.op(OP.RFFT2D, [b], [c])
    g.sg.inputs, g.sg.outputs = [x], [c]
    m.write("cli_unsupported.tflite", "nnaccelctl test: nodes without an NNAPI equivalent")


def state():
    m = Model()
    g = Sub(m, "main")
    x = g.tensor("x", [1, 4])
    h = g.tensor("acc_handle", [], S.TensorType.RESOURCE)
    v = g.tensor("acc_value", [1, 4])
    y = g.tensor("y", [1, 4])
    g.op(OP.CALL_ONCE, [], [], ("CallOnceOptions", dict(initSubgraphIndex=1)))
    g.op(OP.VAR_HANDLE, [], [h], ("VarHandleOptions", dict(sharedName="acc")))
    g.op(OP.READ_VARIABLE, [h], [v])
    g.op(OP.ADD, [x, v], [y], ("AddOptions", dict(fusedActivationFunction=S.ActivationFunctionType.NONE)))
    g.op(OP.ASSIGN_VARIABLE, [h, y], [])
    g.sg.inputs, g.sg.outputs = [x], [y]
    init = Sub(m, "init")
    hi = init.tensor("init_handle", [], S.TensorType.RESOURCE)
    iv = init.tensor("acc_init", [1, 4], data=np.array([[1, 2, 3, 4]], dtype="<f4"))
    init.op(OP.VAR_HANDLE, [], [hi], ("VarHandleOptions", dict(sharedName="acc")))
    init.op(OP.ASSIGN_VARIABLE, [hi, iv], [])
    m.write("cli_state.tflite", "nnaccelctl test: y = x + acc, acc := y; acc starts at [1, 2, 3, 4]")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    add_mul()
    unsupported()
    state()
