#!/usr/bin/python3
"""bfloat16 training throughput on one core, in one run: Strata bf16 against
Strata fp32 and against PyTorch 1.13 under bf16 autocast, on the same model,
tokens, initial weights and batch; model FLOP/s against the measured bf16
GEMM peak of the core.

  /usr/bin/python3 bench/train/bf16_bench.py [--strata build/bin/strata]
      [--model bench/train/gpt2-width.yaml] [--rounds 2] [--warmup 1]
      [--steps 3] [--markdown]

The spec is compiled twice (`dtype: float32` and `dtype: bfloat16`, nothing
else differs); tests/reference/make_inputs.py writes one token file and one
fp32 initial-weights file that all three runs read. Each round runs Strata
fp32, Strata bf16 and the PyTorch peer (bench/peers/torch_train_bench.py
--autocast-bf16: fp32 weights, each micro-batch's forward and backward
under torch.autocast("cpu", dtype=torch.bfloat16), so its matmuls are
oneDNN bf16 GEMMs and its attention is the unfused reference) one after
the other, each with one thread. Strata's time is the sum of the JSONL
step_time_s of the timed steps; PyTorch's is the peer's own timing of the
same steps. Then bench/train/bf16_peak_probe.py measures the core's bf16
and fp32 GEMM peaks (oneDNN, 1024^3 and 2048^3, best of 5). Model FLOPs
per token: bench/peers/peer_common.py (6 P_matmul + 12 L H S).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "peers"))
import peer_common as pc  # noqa: E402
import yaml  # noqa: E402

ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run(cmd, what):
    proc = subprocess.run([str(c) for c in cmd], env=dict(os.environ, **ONE_THREAD),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{what} failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n"
                 f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def progress(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def strata_round(binary, data, init, warmup, steps, log):
    if os.path.exists(log):
        os.remove(log)
    run([binary, "--steps", warmup + steps, "--data", data, "--init", init, "--threads", 1,
         "--log", log, "--print-every", 1000000], f"{binary}")
    with open(log) as f:
        recs = [json.loads(l) for l in f if l.strip()]
    recs = [r for r in recs if "loss" in r and "step" in r]
    timed = recs[warmup:]
    return sum(r["step_time_s"] for r in timed), sum(r["tokens"] for r in timed), recs[-1]["loss"]


def torch_round(spec, data, init, warmup, steps):
    out = run(["/usr/bin/python3", os.path.join(REPO, "bench", "peers", "torch_train_bench.py"),
               "--model-yaml", spec, "--data", data, "--init", init, "--threads", 1,
               "--warmup", warmup, "--steps", steps, "--autocast-bf16"], "the PyTorch peer")
    r = json.loads(out.strip().splitlines()[-1])
    return r["seconds"], r["global_batch"] * r["seq_len"] * r["steps"], r["last_loss"]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    p.add_argument("--model", default=os.path.join(HERE, "gpt2-width.yaml"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()

    work = tempfile.mkdtemp(prefix="strata-bf16-bench-")
    with open(args.model) as f:
        spec = yaml.safe_load(f)
    specs, binaries = {}, {}
    for dtype in ("float32", "bfloat16"):
        spec["model"]["dtype"] = dtype
        specs[dtype] = os.path.join(work, f"model.{dtype}.yaml")
        with open(specs[dtype], "w") as f:
            yaml.safe_dump(spec, f, sort_keys=False)
        binaries[dtype] = os.path.join(work, f"train.{dtype}")
        run([args.strata, "compile", specs[dtype], "--cluster", "local:1", "-o",
             binaries[dtype]], "strata compile")
    m, t = pc.parse_spec(specs["float32"])
    data, init = os.path.join(work, "tokens.bin"), os.path.join(work, "init.safetensors")
    n_tokens = (args.warmup + args.steps) * t.global_batch * m.seq_len + 1
    run(["/usr/bin/python3", os.path.join(REPO, "tests", "reference", "make_inputs.py"),
         "--model-yaml", specs["float32"], "--init-out", init, "--seed", "0",
         "--tokens-out", data, "--num-tokens", n_tokens, "--token-seed", "1"], "make_inputs.py")

    totals = {k: [0.0, 0, None] for k in ("strata fp32", "strata bf16", "torch bf16 autocast")}
    for rnd in range(args.rounds):
        for key, fn in (("strata fp32", lambda: strata_round(binaries["float32"], data, init,
                                                              args.warmup, args.steps,
                                                              os.path.join(work, "f32.jsonl"))),
                        ("strata bf16", lambda: strata_round(binaries["bfloat16"], data, init,
                                                              args.warmup, args.steps,
                                                              os.path.join(work, "bf16.jsonl"))),
                        ("torch bf16 autocast", lambda: torch_round(specs["float32"], data, init,
                                                                     args.warmup, args.steps))):
            s, tok, loss = fn()
            totals[key][0] += s
            totals[key][1] += tok
            totals[key][2] = loss
            progress(f"round {rnd + 1}/{args.rounds}: {key} {tok / s:.1f} tok/s (loss {loss:.4f})")
    probe = json.loads(run(["/usr/bin/python3", os.path.join(HERE, "bf16_peak_probe.py")],
                           "the peak probe"))
    fpt = pc.flops_per_token(m)
    tps = {k: v[1] / v[0] for k, v in totals.items()}
    rows = [[k, f"{tps[k]:.1f}", f"{fpt * tps[k] / 1e9:.1f}",
             f"{100 * fpt * tps[k] / 1e9 / probe['bf16_gflops']:.0f}%", f"{totals[k][2]:.4f}"]
            for k in totals]
    head = ["run", "tokens/s", "model GFLOP/s", f"% of bf16 peak {probe['bf16_gflops']:.0f} GFLOP/s",
            "last loss"]
    sep = " | " if args.markdown else "  "
    print(("| " if args.markdown else "") + sep.join(head) + (" |" if args.markdown else ""))
    if args.markdown:
        print("|" + "---|" * len(head))
    for r in rows:
        print(("| " if args.markdown else "") + sep.join(r) + (" |" if args.markdown else ""))
    print(f"\nStrata bf16 / Strata fp32: {tps['strata bf16'] / tps['strata fp32']:.2f}x; "
          f"Strata bf16 / PyTorch bf16 autocast: "
          f"{tps['strata bf16'] / tps['torch bf16 autocast']:.2f}x; core GEMM peaks: bf16 "
          f"{probe['bf16_gflops']:.0f}, fp32 {probe['f32_gflops']:.0f} GFLOP/s "
          f"({m.family}, hidden {m.hidden}, {m.layers} layers, seq {m.seq_len}, "
          f"{t.global_batch} sequences/step, {args.steps} timed steps x {args.rounds} rounds)")


if __name__ == "__main__":
    main()
