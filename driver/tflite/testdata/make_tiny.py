#!/usr/bin/env python3
"""Writes tiny.tflite next to this script with the flatbuffers schema module that ships in
the ai-edge-litert wheel (object API), so the reader's tests (driver/tflite/src/read.rs,
`a_file_written_by_the_wheels_schema_module_reads`) read a file made by TFLite's own
generated code, not by planus. Run with the LiteRT venv:

    target/litert-venv/bin/python driver/tflite/testdata/make_tiny.py

The model (one subgraph "main"): int8 input [1,4,4,2] -> CONV_2D (per-channel int8 filter,
int32 bias, SAME, RELU6) -> AVERAGE_POOL_2D 2x2/2 VALID -> RESHAPE [1,12] -> FULLY_CONNECTED
with weights that are a sparse CSR int8 constant densified by DENSIFY -> SOFTMAX; plus a
float32 variable tensor. Every value is written out literally below; the Rust test states the
same values independently.
"""

import os

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as S


def quant(scales, zero_points, axis=0):
    q = S.QuantizationParametersT()
    q.scale, q.zeroPoint, q.quantizedDimension = list(scales), list(zero_points), axis
    return q


def main():
    buffers = [S.BufferT()]

    def buffer(array):
        b = S.BufferT()
        b.data = list(np.asarray(array).tobytes())
        buffers.append(b)
        return len(buffers) - 1

    tensors = []

    def tensor(name, ttype, shape, buf=0, q=None, **extra):
        t = S.TensorT()
        t.name, t.type, t.shape, t.buffer, t.quantization = name, ttype, list(shape), buf, q
        for k, v in extra.items():
            setattr(t, k, v)
        tensors.append(t)
        return len(tensors) - 1

    i8, i32, f32 = S.TensorType.INT8, S.TensorType.INT32, S.TensorType.FLOAT32
    x = tensor("input", i8, [1, 4, 4, 2], q=quant([0.5], [-1]), shapeSignature=[-1, 4, 4, 2])
    w = tensor("conv/filter", i8, [3, 1, 1, 2],
               buffer(np.array([1, -2, 3, -4, 5, -6], np.int8)),
               q=quant([0.25, 0.5, 1.0], [0, 0, 0]))
    b = tensor("conv/bias", i32, [3], buffer(np.array([10, -20, 30], np.int32)),
               q=quant([0.125, 0.25, 0.5], [0, 0, 0]))
    conv = tensor("conv/out", i8, [1, 4, 4, 3], q=quant([1.0], [0]))
    pool = tensor("pool/out", i8, [1, 2, 2, 3], q=quant([1.0], [0]))
    flat = tensor("flat", i8, [1, 12], q=quant([1.0], [0]))
    # [[0,0,0,7,0,...,0], [-8,0,...,0,9]]: row 0 has column 3, row 1 columns 0 and 11.
    sp = S.SparsityParametersT()
    sp.traversalOrder, sp.blockMap = [0, 1], []
    rows = S.DimensionMetadataT()
    rows.format, rows.denseSize = S.DimensionType.DENSE, 2
    cols = S.DimensionMetadataT()
    cols.format = S.DimensionType.SPARSE_CSR
    segments, indices = S.Uint8VectorT(), S.Uint8VectorT()
    segments.values, indices.values = [0, 1, 3], [3, 0, 11]
    cols.arraySegmentsType, cols.arraySegments = S.SparseIndexVector.Uint8Vector, segments
    cols.arrayIndicesType, cols.arrayIndices = S.SparseIndexVector.Uint8Vector, indices
    sp.dimMetadata = [rows, cols]
    fcw_sparse = tensor("fc/weights_sparse", i8, [2, 12], buffer(np.array([7, -8, 9], np.int8)),
                        q=quant([0.1], [0]), sparsity=sp)
    fcw = tensor("fc/weights", i8, [2, 12], q=quant([0.1], [0]))
    logits = tensor("logits", i8, [1, 2], q=quant([0.2], [3]))
    probs = tensor("probs", i8, [1, 2], q=quant([1 / 256], [-128]))
    tensor("state", f32, [2], isVariable=True)

    codes, operators = [], []

    def op(code, version, inputs, outputs, options_type=None, options=None):
        oc = S.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), version
        codes.append(oc)
        o = S.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = len(codes) - 1, inputs, outputs
        if options is not None:
            o.builtinOptionsType, o.builtinOptions = options_type, options
        operators.append(o)

    c = S.Conv2DOptionsT()
    c.padding, c.strideW, c.strideH = S.Padding.SAME, 1, 1
    c.fusedActivationFunction = S.ActivationFunctionType.RELU6
    op(S.BuiltinOperator.CONV_2D, 3, [x, w, b], [conv], S.BuiltinOptions.Conv2DOptions, c)
    p = S.Pool2DOptionsT()
    p.padding, p.strideW, p.strideH, p.filterWidth, p.filterHeight = S.Padding.VALID, 2, 2, 2, 2
    op(S.BuiltinOperator.AVERAGE_POOL_2D, 2, [conv], [pool], S.BuiltinOptions.Pool2DOptions, p)
    r = S.ReshapeOptionsT()
    r.newShape = [1, 12]
    op(S.BuiltinOperator.RESHAPE, 1, [pool], [flat], S.BuiltinOptions.ReshapeOptions, r)
    op(S.BuiltinOperator.DENSIFY, 1, [fcw_sparse], [fcw])
    f = S.FullyConnectedOptionsT()
    f.keepNumDims = True
    op(S.BuiltinOperator.FULLY_CONNECTED, 4, [flat, fcw, -1], [logits],
       S.BuiltinOptions.FullyConnectedOptions, f)
    s = S.SoftmaxOptionsT()
    s.beta = 1.0
    op(S.BuiltinOperator.SOFTMAX, 2, [logits], [probs], S.BuiltinOptions.SoftmaxOptions, s)

    sg = S.SubGraphT()
    sg.name, sg.tensors, sg.operators, sg.inputs, sg.outputs = "main", tensors, operators, [x], [probs]
    model = S.ModelT()
    model.version, model.description = 3, "nnaccel driver/tflite/testdata/make_tiny.py"
    model.operatorCodes, model.subgraphs, model.buffers = codes, [sg], buffers
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny.tflite")
    with open(out, "wb") as fh:
        fh.write(bytes(builder.Output()))
    print("wrote", out)


if __name__ == "__main__":
    main()
