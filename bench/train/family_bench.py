#!/usr/bin/python3
"""Model FLOP/s of a Llama-shaped model beside a GPT-shaped one of equal
FLOPs, single core, in one run.

  /usr/bin/python3 bench/train/family_bench.py [--strata build/bin/strata]
      [--rounds 3] [--warmup 1] [--steps 3] [--markdown]

The models (bench/train/family-*.yaml): GPT-2-small width (hidden 768, 12
heads), 4 layers, 256-token sequences, vocabulary 8,192, 4 sequences a
step; `gpt` with ffn 3072, `llama` with the Llama recipe and ffn 2048 (gate
+ up + down = fc + proj) and 12 kv heads: the same model FLOPs per token.
`llama-gqa` adds grouped-query attention (4 kv heads), which removes FLOPs
from k and v. For each model: `strata compile MODEL --cluster local:1`, one
token file and one initial-weights file (tests/reference/make_inputs.py);
then, --rounds times, every model one after the other (never concurrently),
one thread each. A round's time is the sum of the JSONL step_time_s of the
steps after the warm-up ones; model FLOPs per token are
bench/peers/peer_common.py's (6 P_matmul + 12 L H S) for both families. On
a machine shared with other jobs a round can be slowed by them, so each
model's tokens/s is reported as the median and the best of its rounds, and
the ratios to the GPT's model GFLOP/s use the same statistic on both sides.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "bench", "peers"))
import peer_common as pc  # noqa: E402
from train_bench import BenchError, build_inputs, cpu_name, run_strata  # noqa: E402

MODELS = ["gpt", "llama", "llama-gqa"]


def prepare(name, args, workdir):
    spec = os.path.join(HERE, f"family-{name}.yaml")
    m, t = pc.parse_spec(spec)
    mdir = os.path.join(workdir, name)
    n_tokens = (args.warmup + args.steps) * t.global_batch * m.seq_len + 1
    binary, data, init = build_inputs(args, spec, mdir, n_tokens)
    return {"name": name, "cfg": m, "binary": binary, "data": data, "init": init,
            "dir": mdir, "seconds": 0.0, "tokens": 0, "rounds": []}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    p.add_argument("--launcher", help="strata-launcher to embed (default: the one beside --strata)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per run")
    p.add_argument("--steps", type=int, default=3, help="timed steps per run")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--rounds and --steps must be >= 1, --warmup >= 0")
    if not os.access(args.strata, os.X_OK):
        p.error(f"--strata {args.strata}: not an executable; build `strata` and "
                "`strata-launcher` or pass --strata PATH")
    try:
        workdir = tempfile.mkdtemp(prefix="strata-family-bench-")
        runs = [prepare(name, args, workdir) for name in MODELS]
        for r in range(args.rounds):
            for m in runs:
                out = run_strata(m["binary"], m["data"], m["init"], args.warmup, args.steps,
                                 m["dir"])
                m["seconds"] += out["seconds"]
                m["tokens"] += out["tokens"]
                m["rounds"].append(out["tokens"] / out["seconds"])
                print(f"round {r + 1} {m['name']}: {m['rounds'][-1]:.1f} tokens/s",
                      file=sys.stderr)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    base = None
    head = ["model", "FLOP/token (M)", "tokens/s per round", "median tok/s",
            "median GFLOP/s", "/ gpt (median)", "best tok/s", "best GFLOP/s",
            "/ gpt (best)"]
    rows = []
    for m in runs:
        fpt = pc.flops_per_token(m["cfg"])
        med, best = statistics.median(m["rounds"]), max(m["rounds"])
        gmed, gbest = med * fpt / 1e9, best * fpt / 1e9
        base = base or (gmed, gbest)
        rows.append([m["name"], f"{fpt / 1e6:.1f}",
                     " ".join(f"{x:.0f}" for x in m["rounds"]), f"{med:.1f}",
                     f"{gmed:.1f}", f"{gmed / base[0]:.3f}", f"{best:.1f}",
                     f"{gbest:.1f}", f"{gbest / base[1]:.3f}"])
    print(f"Model FLOP/s by family ({time.strftime('%Y-%m-%d %H:%M')}, {cpu_name()}); "
          f"{args.rounds} rounds of {args.warmup} warm-up + {args.steps} timed steps, "
          "one thread, run one after the other")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        for line in [head] + rows:
            print("  ".join(c.ljust(w) for c, w in zip(line, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
