#!/usr/bin/python3
"""Wall-clock time of whole `strata plan` commands on the Llama 3 specs
(examples/models/llama3-*.yaml): loading and validating the spec (the
expanded graph of every layer), the cost model and the full search with
nothing pinned, and the report, as a user runs it.

  /usr/bin/python3 bench/planner/plan_cli_bench.py [--strata build/bin/strata]
      [--repeats 3] [--markdown]

Each row is the best of --repeats runs; the search time is the one the
report prints for that run.
"""

import argparse
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = [("Llama 3 8B", "llama3-8b.yaml", "dgx-h100:8"),
         ("Llama 3 70B", "llama3-70b.yaml", "dgx-h100:64"),
         ("Llama 3.1 405B", "llama3-405b.yaml", "dgx-h100:2048")]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    head = ["model", "cluster", "parameters", "wall time (s)", "search (ms)",
            "candidates / costed", "chosen plan", "predicted MFU"]
    rows = []
    for name, spec, cluster in CASES:
        best = None
        for _ in range(max(1, args.repeats)):
            argv = [args.strata, "plan", os.path.join(REPO, "examples", "models", spec),
                    "--cluster", cluster]
            t0 = time.monotonic()
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
            took = time.monotonic() - t0
            if proc.returncode != 0:
                print(f"error: {' '.join(argv)} failed:\n{proc.stderr}", file=sys.stderr)
                return 1
            if best is None or took < best[0]:
                best = (took, proc.stdout)
        took, out = best
        params = re.search(r"\(([0-9.]+[KMB]) parameters", out).group(1)
        plan = re.search(r"^plan: (.*)$", out, re.M).group(1)
        search = re.search(r"search: ([0-9.]+) ms, ([0-9]+) candidates, ([0-9]+) costed", out)
        mfu = re.search(r"MFU ([0-9.]+%)", out).group(1)
        rows.append([name, cluster, params, f"{took:.3f}", search.group(1),
                     f"{search.group(2)} / {search.group(3)}", plan, mfu])
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        for r in [head] + rows:
            print("  ".join(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
