#!/usr/bin/python3
"""Fused causal attention (FlashAttention-2) against the unfused graph
(matmul, causal softmax, matmul): training-step time and compiled arena,
single core, in one run.

  /usr/bin/python3 bench/train/attention_bench.py [--strata build/bin/strata]
      [--seqs 1024,4096] [--families gpt,llama] [--rounds 3] [--warmup 1]
      [--steps 2] [--markdown]

The model is attention-heavy on purpose: one layer of width 256 with 4
heads (head dim 64), ffn 1024, vocabulary 512, one sequence a step; `llama`
has 2 kv heads (grouped-query). For each family and sequence length the
same spec is compiled twice with `strata compile --cluster local:1`, once
with `attention: fused` (the default) and once with `attention: unfused`;
the arena is what `strata compile` reports for rank 0 (the bytes the
runtime allocates: activations, gradients, parameters, optimizer state).
Both binaries train on the same tokens from the same initial weights
(tests/reference/make_inputs.py), alternately, --rounds times, one thread
each; a round's time is the mean JSONL step_time_s of the steps after the
warm-up ones, and the table reports the median over rounds. The first
losses of the two binaries are printed too: the same function, so they
agree to float32 rounding.
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from train_bench import ONE_THREAD, BenchError, run  # noqa: E402

SPEC = """model:
  family: {family}
  vocab: 512
  seq_len: {seq}
  hidden: 256
  heads: 4{kv}
  layers: 1
  ffn_hidden: 1024
  attention: {attention}
training:
  global_batch: 1
  micro_batch: 1
  optimizer: {{kind: adamw, lr: 1.0e-4}}
  seed: 0
"""


def run_steps(binary, data, init, warmup, steps, workdir):
    """Trains warmup + steps steps, one thread; -> (mean step_time_s of the
    steps after the warm-up ones, first loss)."""
    log = os.path.join(workdir, "steps.jsonl")
    if os.path.exists(log):
        os.remove(log)
    run([binary, "--steps", str(warmup + steps), "--data", data, "--init", init,
         "--threads", "1", "--log", log, "--print-every", "1000000"],
        env=dict(os.environ, **ONE_THREAD), what="the Strata training binary")
    with open(log) as f:
        records = [r for r in (json.loads(line) for line in f if line.strip()) if "step" in r]
    if len(records) != warmup + steps:
        raise BenchError(f"{log}: expected {warmup + steps} step records, got {len(records)}")
    timed = records[warmup:]
    return sum(r["step_time_s"] for r in timed) / steps, records[0]["loss"]


def progress(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def compile_case(args, family, seq, attention, workdir):
    """-> (binary, arena MiB) for one spec."""
    kv = "\n  kv_heads: 2" if family == "llama" else ""
    spec = os.path.join(workdir, f"{family}-{seq}-{attention}.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(family=family, seq=seq, kv=kv, attention=attention))
    binary = spec[:-len(".yaml")]
    out = run([args.strata, "compile", spec, "--cluster", "local:1", "-o", binary],
              what="strata compile")
    m = re.search(r"rank 0: arena ([0-9.]+) (B|KiB|MiB|GiB)", out)
    if not m:
        raise BenchError(f"no arena size in the output of strata compile:\n{out}")
    scale = {"B": 1 / 1024 ** 2, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}[m.group(2)]
    return spec, binary, float(m.group(1)) * scale


def make_inputs(spec, seq, steps, workdir):
    data, init = os.path.join(workdir, f"tokens-{seq}.bin"), os.path.join(workdir, f"init-{seq}.safetensors")
    run(["/usr/bin/python3", os.path.join(REPO, "tests", "reference", "make_inputs.py"),
         "--model-yaml", spec, "--init-out", init, "--seed", "0", "--tokens-out", data,
         "--num-tokens", str(steps * seq + 1), "--token-seed", "1"], what="make_inputs.py")
    return data, init


def bench(args, family, seq, workdir):
    cases = {}
    for attention in ("fused", "unfused"):
        spec, binary, arena = compile_case(args, family, seq, attention, workdir)
        cases[attention] = {"spec": spec, "binary": binary, "arena": arena, "times": []}
    data, init = make_inputs(cases["fused"]["spec"], seq, args.warmup + args.steps, workdir)
    for rnd in range(args.rounds):
        for attention, c in cases.items():
            seconds, c["first_loss"] = run_steps(c["binary"], data, init, args.warmup,
                                                 args.steps, workdir)
            c["times"].append(seconds)
            progress(f"{family} seq {seq} {attention} round {rnd + 1}/{args.rounds}: "
                     f"{c['times'][-1]:.3f} s/step")
    f, u = cases["fused"], cases["unfused"]
    return {"family": family, "seq": seq,
            "fused_s": statistics.median(f["times"]), "unfused_s": statistics.median(u["times"]),
            "fused_arena": f["arena"], "unfused_arena": u["arena"],
            "fused_loss": f["first_loss"], "unfused_loss": u["first_loss"]}


def print_table(rows, markdown):
    head = ["family", "seq", "fused s/step", "unfused s/step", "speed-up",
            "fused arena MiB", "unfused arena MiB", "first loss fused / unfused"]
    body = [[r["family"], str(r["seq"]), f"{r['fused_s']:.3f}", f"{r['unfused_s']:.3f}",
             f"{r['unfused_s'] / r['fused_s']:.2f}x", f"{r['fused_arena']:.1f}",
             f"{r['unfused_arena']:.1f}", f"{r['fused_loss']:.6f} / {r['unfused_loss']:.6f}"]
            for r in rows]
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for b in body:
            print("| " + " | ".join(b) + " |")
        return
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    for line in [head] + body:
        print("  ".join(c.rjust(w) for c, w in zip(line, widths)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    p.add_argument("--seqs", default="1024,4096")
    p.add_argument("--families", default="gpt")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per run")
    p.add_argument("--steps", type=int, default=2, help="timed steps per run")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--rounds and --steps must be >= 1 and --warmup >= 0")
    families = [f for f in args.families.split(",") if f]
    if any(f not in ("gpt", "llama") for f in families):
        p.error("--families takes gpt and/or llama")
    try:
        seqs = [int(s) for s in args.seqs.split(",") if s]
    except ValueError:
        p.error("--seqs takes comma-separated integers such as 1024,4096")
    if not os.path.exists(args.strata):
        p.error(f"--strata {args.strata} does not exist; build first (bash scripts/build.sh)")
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="strata-attention-bench-") as workdir:
            for family in families:
                for seq in seqs:
                    rows.append(bench(args, family, seq, workdir))
    except BenchError as e:
        print(f"attention_bench: {e}", file=sys.stderr)
        return 1
    print_table(rows, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
