#!/usr/bin/env python3
"""Runs one .tflite model once on LiteRT: inputs from a .npz, outputs into a .npz.

    litert_run.py MODEL.tflite INPUTS.npz OUTPUTS.npz [--resolver ref|default] [--invocations N]

The inputs archive names its arrays by the model's input tensor names, or `arr_0`, `arr_1`, ...
in input order (as `nnaccelctl run --inputs` reads them); each array must have the input's
element type and shape. The outputs archive holds one array per model output, named by the
output tensor's name, in the tensor's own element type (a quantized output holds its raw
integers). `--resolver ref` (the default) uses TFLite's reference kernels
(`OpResolverType.BUILTIN_REF`), the oracle whose quantized arithmetic NNAPI follows; `default`
is LiteRT's default CPU path (XNNPACK). `--invocations N` invokes N times on the same inputs
and keeps the last outputs (for models with state). Exit 2 with a one-line message on a bad
archive or a model LiteRT refuses.
"""

import argparse
import sys

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

RESOLVERS = {"ref": OpResolverType.BUILTIN_REF, "default": OpResolverType.AUTO}


def fail(msg):
    print("litert_run.py: " + msg, file=sys.stderr)
    sys.exit(2)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("inputs")
    p.add_argument("outputs")
    p.add_argument("--resolver", choices=sorted(RESOLVERS), default="ref")
    p.add_argument("--invocations", type=int, default=1)
    a = p.parse_args()
    try:
        it = Interpreter(model_path=a.model, num_threads=1,
                         experimental_op_resolver_type=RESOLVERS[a.resolver])
        it.allocate_tensors()
    except (RuntimeError, ValueError) as e:
        fail("%s: LiteRT cannot load it: %s" % (a.model, str(e).strip().replace("\n", " ")))
    with np.load(a.inputs, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    details = it.get_input_details()
    for i, d in enumerate(details):
        value = arrays.get(d["name"], arrays.get("arr_%d" % i))
        if value is None:
            fail("%s has no array %r (nor arr_%d)" % (a.inputs, d["name"], i))
        if value.dtype != d["dtype"] or list(value.shape) != list(d["shape"]):
            fail("%s: array %r is %s%s, the input is %s%s" % (
                a.inputs, d["name"], value.dtype, list(value.shape),
                np.dtype(d["dtype"]), list(d["shape"])))
        it.set_tensor(d["index"], value)
    try:
        for _ in range(max(a.invocations, 1)):
            it.invoke()
    except RuntimeError as e:
        fail("%s: invoke failed: %s" % (a.model, str(e).strip().replace("\n", " ")))
    outputs = {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}
    with open(a.outputs, "wb") as f:  # a file object: savez adds no ".npz" to the name
        np.savez(f, **outputs)


if __name__ == "__main__":
    main()
