#!/usr/bin/env python3
"""Runs a .tflite model once on LiteRT and prints its outputs as JSON on stdout:
{"outputs": [{"shape": [...], "dtype": "float32", "data": [...]}]} (quantized outputs as their
raw integers, as `nnaccelctl run --json` prints them).

    litert_run.py MODEL.tflite INPUTS.json [--threads N] [--resolver default|ref]
"""

import argparse
import json
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from litert_common import RESOLVERS, interpreter, set_input


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("inputs")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--resolver", choices=sorted(RESOLVERS), default="default")
    a = p.parse_args()
    it = interpreter(a.model, a.threads, a.resolver)
    set_input(it, a.inputs)
    it.invoke()
    outs = []
    for d in it.get_output_details():
        v = it.get_tensor(d["index"])
        outs.append({"shape": list(map(int, v.shape)), "dtype": str(v.dtype),
                     "data": v.ravel().tolist()})
    print(json.dumps({"outputs": outs}))


if __name__ == "__main__":
    main()
