#!/usr/bin/python3
"""Two-rank data-parallel training: Strata vs PyTorch DistributedDataParallel.

  /usr/bin/python3 bench/ddp/ddp_bench.py [--build build] [--model-yaml M.yaml] \
      [--steps 10] [--warmup 3] [--rounds 2] [--work DIR]

Same model (default bench/ddp/gpt-ddp.yaml), same token file, same global
batch split the same way (each rank trains on half of every step's batch in
one micro-batch), fp32, AdamW, one thread per rank, 2 ranks on this machine:

- Strata: `strata compile --cluster local:2 --pin dp=2 --pin zero=0
  --pin micro_batch=B/2`, run with `mpirun --oversubscribe -np 2 BIN --data
  tokens.bin` (one thread per rank is the runtime's default). Bucketed
  gradient all-reduce overlapped with backward, over MPI shared memory.
- PyTorch 1.13: bench/peers/torch_ddp_bench.py (DDP over gloo on loopback,
  torch.set_num_threads(1)), same --data and --micro-batch.

Tokens/s counts timed steps only (after --warmup): Strata's is global batch ×
sequence × steps over the sum of the logged step times (each the slowest
rank's); the peer's is the same tokens over the wall time between two
barriers. The two systems run one after the other, --rounds times
alternately, because timings on this shared machine drift; the table shows
every round and the ratio of the medians.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_run as sr  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(sr.REPO, "bench", "peers", "torch_ddp_bench.py")


def read_model(path):
    """-> (vocab, seq_len, global_batch) from the spec (flat keys suffice)."""
    text = open(path).read()

    def key(name):
        m = re.search(rf"^\s*{name}:\s*(\d+)", text, re.M)
        if not m:
            raise sr.BenchError(f"{path}: no '{name}:' found")
        return int(m.group(1))
    return key("vocab"), key("seq_len"), key("global_batch")


def write_tokens(path, vocab, count, seed):
    rng = np.random.default_rng(seed)
    rng.integers(0, vocab, size=count, dtype=np.uint16).tofile(path)


def run_strata(binary, tokens, steps, warmup, log, tokens_per_step):
    recs = sr.run_program(binary, 2, warmup + steps, log, ["--data", tokens])
    timed = [r["step_time_s"] for r in recs[warmup:]]
    return {"tokens_per_s": tokens_per_step * len(timed) / sum(timed),
            "step_time_s": sum(timed) / len(timed),
            "first_loss": recs[0]["loss"], "last_loss": recs[-1]["loss"]}


def run_torch(model, tokens, steps, warmup, micro):
    cmd = [sys.executable, PEER, "--model-yaml", model, "--world-size", "2",
           "--data", tokens, "--steps", str(steps), "--warmup", str(warmup),
           "--micro-batch", str(micro)]
    out = sr.run(cmd, "PyTorch DDP peer", timeout=1800)
    line = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not line:
        raise sr.BenchError(f"the PyTorch peer printed no JSON:\n{out}")
    return json.loads(line[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(sr.REPO, "build"))
    ap.add_argument("--model-yaml", default=os.path.join(HERE, "gpt-ddp.yaml"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", help="keep the binary, tokens and logs here")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.rounds < 1:
        ap.error("--steps and --rounds must be >= 1, --warmup >= 0")
    if sys.executable != "/usr/bin/python3":
        print("note: run with /usr/bin/python3 (the interpreter with torch 1.13)",
              file=sys.stderr)
    try:
        strata = sr.find_tools(args.build)
        sr.require_mpirun()
        work = args.work or tempfile.mkdtemp(prefix="strata-ddp-")
        os.makedirs(work, exist_ok=True)
        vocab, seq, batch = read_model(args.model_yaml)
        if batch % 2:
            raise sr.BenchError(f"{args.model_yaml}: global_batch {batch} is odd; "
                                "two ranks need an even batch")
        micro = batch // 2
        tokens = os.path.join(work, "tokens.bin")
        write_tokens(tokens, vocab, (args.steps + args.warmup) * batch * seq + 1, 0)
        binary = os.path.join(work, "ddp2")
        summary = sr.compile_plan(strata, args.model_yaml, 2,
                                  ["dp=2", "zero=0", f"micro_batch={micro}"], binary)
        print(f"strata plan: {summary}", file=sys.stderr, flush=True)
        rows, ours, theirs = [], [], []
        for rnd in range(args.rounds):
            s = run_strata(binary, tokens, args.steps, args.warmup,
                           os.path.join(work, f"strata-{rnd}.jsonl"), batch * seq)
            t = run_torch(args.model_yaml, tokens, args.steps, args.warmup, micro)
            ours.append(s["tokens_per_s"])
            theirs.append(t["tokens_per_s"])
            print(f"  round {rnd + 1}: strata {s['tokens_per_s']:.0f} tok/s, torch "
                  f"{t['tokens_per_s']:.0f} tok/s", file=sys.stderr, flush=True)
            rows.append([f"{rnd + 1}", "Strata (MPI, bucketed all-reduce)",
                         f"{s['tokens_per_s']:.0f}", f"{s['step_time_s']:.3f}",
                         f"{s['first_loss']:.3f} → {s['last_loss']:.3f}", ""])
            rows.append([f"{rnd + 1}", f"PyTorch {t['torch_version']} DDP (gloo)",
                         f"{t['tokens_per_s']:.0f}", f"{t['step_time_s']:.3f}",
                         f"{t['first_loss']:.3f} → {t['last_loss']:.3f}",
                         f"{s['tokens_per_s'] / t['tokens_per_s']:.2f}×"])
    except (sr.BenchError, OSError, subprocess.SubprocessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"\nmodel {os.path.relpath(args.model_yaml, sr.REPO)}, 2 ranks × 1 thread, "
          f"global batch {batch} ({micro} per rank), seq {seq}, "
          f"{args.warmup} warm-up + {args.steps} timed steps\n")
    sr.print_table(["round", "system", "tokens/s", "s/step", "loss first → last",
                    "Strata / PyTorch"], rows)
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"\nmedian tokens/s: Strata {statistics.median(ours):.0f}, PyTorch "
          f"{statistics.median(theirs):.0f}: {ratio:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
