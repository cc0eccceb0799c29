#!/usr/bin/python3
"""Wall-clock time of whole `strata compile` commands against the number of
layers: a narrow GPT (hidden 64, vocabulary 512, sequence 64) with 8
micro-batches per step on one CPU rank, so the time is the compiler's
(import, plan, partition, autodiff, emission and the arena's memory plan),
not the size of the tensors.

  /usr/bin/python3 bench/planner/compile_scaling_bench.py [--strata build/bin/strata]
      [--layers 100,200,400,800,1000] [--micro-batches 8] [--repeats 1]
      [--markdown]

Each row is the best of --repeats runs (by wall time); CPU time is user +
system time of that run, which a loaded machine inflates less than wall
time. The arena size is the one
`strata compile` prints for rank 0, so a change to the memory planner can be
compared for both time and bytes.
"""

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SPEC = """model:
  family: gpt
  vocab: 512
  seq_len: 64
  hidden: 64
  heads: 4
  layers: {layers}
  dtype: float32
training:
  global_batch: {micro_batches}
  micro_batch: 1
  optimizer: {{kind: adamw, lr: 1.0e-3}}
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    p.add_argument("--layers", default="100,200,400,800,1000")
    p.add_argument("--micro-batches", type=int, default=8)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    head = ["layers", "micro-batches", "wall time (s)", "CPU time (s)", "arena (rank 0)",
            "instructions per micro-batch"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for layers in [int(x) for x in args.layers.split(",")]:
            spec = os.path.join(tmp, f"gpt-{layers}.yaml")
            with open(spec, "w") as f:
                f.write(SPEC.format(layers=layers, micro_batches=args.micro_batches))
            best = None
            for _ in range(max(1, args.repeats)):
                cmd = [args.strata, "compile", spec, "--cluster", "local:1",
                       "-o", os.path.join(tmp, "gpt")]
                t0 = time.monotonic()
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
                took = time.monotonic() - t0
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                if proc.returncode != 0:
                    print(f"error: {' '.join(cmd)} failed:\n{proc.stderr}",
                          file=sys.stderr)
                    return 1
                if best is None or took < best[0]:
                    best = (took, cpu, proc.stdout)
            took, cpu, out = best
            m = re.search(r"rank 0: arena ([0-9.]+ \S+) .*?; ([0-9]+) instructions "
                          r"per micro-batch, ([0-9]+) micro-batch", out)
            if not m:
                print(f"error: unexpected output:\n{out}", file=sys.stderr)
                return 1
            rows.append([str(layers), m.group(3), f"{took:.2f}", f"{cpu:.2f}", m.group(1),
                         m.group(2)])
            if not args.markdown:
                print("  ".join(rows[-1]), flush=True)
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
