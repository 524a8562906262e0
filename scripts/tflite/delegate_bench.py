#!/usr/bin/env python3
"""Time per inference of LiteRT alone and of LiteRT with nnaccel's external delegate, on the
same models and inputs, measured in one run, with the outputs' agreement (docs/tflite.md,
"Timing the delegate").

Run it in the LiteRT venv (scripts/litert-venv.sh):

    target/litert-venv/bin/python scripts/tflite/delegate_bench.py \
        --delegate target/release/libnnaccel_tflite_delegate.so \
        [--service /run/nnaccel/hal.sock] [--threads 1] [--seconds 2] MODEL.tflite ...

Columns, per model: LiteRT alone; LiteRT + the delegate on the embedded stack (the simulated
device in this process); with --service, LiteRT + the delegate through nnaccel-hald at that
socket. Each: the median ms of as many invokes as fill --seconds (at least 5) after 3 warm-up
invokes, and the ratio to LiteRT alone (> 1: slower). "agree" is the largest difference from
LiteRT alone, relative to the output's range for float outputs, in quanta for 8/16-bit ones.
Inputs are uniform random in each input's range (seed 7), the same for every column.
Nothing here asserts a time; the figures move with the machine's load.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np
from ai_edge_litert import interpreter as litert


def inputs_for(interp, seed=7):
    rng = np.random.default_rng(seed)
    out = []
    for d in interp.get_input_details():
        dt = np.dtype(d["dtype"])
        shape = tuple(int(x) for x in d["shape"])
        if dt.kind == "f":
            out.append(rng.uniform(-1.0, 1.0, shape).astype(dt))
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, int(info.max) + 1, shape, dtype=dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(dt))
        else:
            raise SystemExit(f"input {d['name']}: dtype {dt} not handled")
    return out


def run_once(interp, inputs):
    for d, x in zip(interp.get_input_details(), inputs):
        interp.set_tensor(d["index"], x)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


def timed(interp, inputs, seconds):
    for _ in range(3):
        outputs = run_once(interp, inputs)
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < 5 or time.perf_counter() < deadline:
        for d, x in zip(interp.get_input_details(), inputs):
            interp.set_tensor(d["index"], x)
        t0 = time.perf_counter()
        interp.invoke()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, outputs


def disagreement(interp, ours, theirs):
    worst = 0.0
    unit = "range"
    for d, a, b in zip(interp.get_output_details(), ours, theirs):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        if np.dtype(d["dtype"]).kind == "f":
            span = float(np.max(b) - np.min(b)) or 1.0
            worst = max(worst, float(diff.max(initial=0.0)) / span)
        else:
            unit = "quanta"
            worst = max(worst, float(diff.max(initial=0.0)))
    return worst, unit


def make(path, threads, delegate=None):
    delegates = [delegate] if delegate is not None else None
    interp = litert.Interpreter(model_path=path, num_threads=threads,
                                experimental_delegates=delegates)
    interp.allocate_tensors()
    return interp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help=".tflite files")
    ap.add_argument("--delegate", required=True, help="path of libnnaccel_tflite_delegate.so")
    ap.add_argument("--service", help="also time the delegate through nnaccel-hald at this socket")
    ap.add_argument("--threads", type=int, default=1, help="LiteRT's num_threads (default 1)")
    ap.add_argument("--seconds", type=float, default=2.0, help="time per measurement (default 2)")
    args = ap.parse_args()
    if not os.path.exists(args.delegate):
        raise SystemExit(f"{args.delegate}: no such file (cargo build --release -p nnaccel-tflite-delegate)")

    # The embedded stack unless told otherwise: no system socket is picked up by accident.
    embedded = litert.load_delegate(args.delegate, {"log": "0"})
    service = None
    if args.service:
        service = litert.load_delegate(args.delegate, {"service": args.service})

    cols = ["LiteRT", "+deleg emb", "ratio"] + (["+deleg svc", "ratio"] if service else [])
    print(f"LiteRT num_threads={args.threads}; times: median ms per invoke")
    print(f"{'model':32} " + " ".join(f"{c:>10}" for c in cols) + "   agree (emb/svc)")
    for path in args.models:
        name = os.path.basename(path)
        base = make(path, args.threads)
        inputs = inputs_for(base)
        t_base, ref = timed(base, inputs, args.seconds)
        row = [f"{t_base:10.3f}"]
        agree = []
        for delegate in [embedded] + ([service] if service else []):
            interp = make(path, args.threads, delegate)
            t, outs = timed(interp, inputs, args.seconds)
            worst, unit = disagreement(interp, outs, ref)
            row += [f"{t:10.3f}", f"{t / t_base:10.2f}"]
            agree.append(f"{worst:.2g} {unit}")
        print(f"{name:32} " + " ".join(row) + "   " + " / ".join(agree))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
