"""What litert_run.py and litert_bench.py share: an interpreter for a .tflite file with a
thread count and an op resolver, and the input from an nnaccel inputs file (gen.py's)."""

import json

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

RESOLVERS = {
    # LiteRT's default CPU path: the builtin kernels with the XNNPACK delegate applied.
    "default": OpResolverType.AUTO,
    # The plain reference kernels, no delegate (TFLite's oracle).
    "ref": OpResolverType.BUILTIN_REF,
}


def interpreter(model, threads, resolver):
    it = Interpreter(model_path=model, num_threads=threads,
                     experimental_op_resolver_type=RESOLVERS[resolver])
    it.allocate_tensors()
    return it


def set_input(it, inputs_path):
    with open(inputs_path) as f:
        values = json.load(f)["inputs"]
    details = it.get_input_details()
    if len(values) != len(details):
        raise SystemExit("%s has %d inputs, the model %d" % (inputs_path, len(values),
                                                             len(details)))
    for d, v in zip(details, values):
        it.set_tensor(d["index"], np.array(v, dtype=d["dtype"]).reshape(d["shape"]))
