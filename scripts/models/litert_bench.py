#!/usr/bin/env python3
"""Times a .tflite model on LiteRT: warm-up runs, then the median of timed invoke() calls
(as many as fill --seconds by the warm-up's pace, at least --min-runs, at most 1000), at each
thread count asked for. Prints one line per thread count: `threads T median_ms M runs N`.

    litert_bench.py MODEL.tflite INPUTS.json [--threads 1,2] [--seconds S] [--min-runs N]
                    [--resolver default|ref]

The default resolver is LiteRT's default CPU path (XNNPACK delegate), as the model bench
compares against (tests/benches/models.rs).
"""

import argparse
import sys
import statistics
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from litert_common import RESOLVERS, interpreter, set_input

WARMUP = 3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("inputs")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--min-runs", type=int, default=5)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--resolver", choices=sorted(RESOLVERS), default="default")
    a = p.parse_args()
    for threads in [int(t) for t in a.threads.split(",")]:
        it = interpreter(a.model, threads, a.resolver)
        set_input(it, a.inputs)
        t = time.perf_counter()
        for _ in range(WARMUP):
            it.invoke()
        pace = (time.perf_counter() - t) / WARMUP
        runs = max(a.min_runs, 1, min(1000, int(a.seconds / max(pace, 1e-6))))
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            it.invoke()
            times.append(time.perf_counter() - t)
        print("threads %d median_ms %.4f runs %d"
              % (threads, statistics.median(times) * 1e3, runs), flush=True)


if __name__ == "__main__":
    main()
