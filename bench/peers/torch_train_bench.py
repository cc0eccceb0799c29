#!/usr/bin/python3
"""PyTorch peer for Strata's single-process training benchmark.

  /usr/bin/python3 bench/peers/torch_train_bench.py --model-yaml M.yaml \
      [--data tokens.bin] [--steps 10] [--warmup 2] [--threads 1]
      [--autocast-bf16]

Trains the spec's model with the same step semantics as the reference
(tests/reference/train.py: micro-batching, AdamW/SGD, schedule, clipping),
times --steps steps after --warmup untimed ones, and prints one JSON object:
tokens_per_s = global_batch * seq_len * steps / seconds and
gflops_per_s = flops_per_token * tokens_per_s / 1e9, with the model-FLOP
formula documented in peer_common.py. --autocast-bf16 runs each
micro-batch's forward and backward under torch.autocast("cpu",
dtype=torch.bfloat16) (fp32 weights, optimizer and loss scaling as
PyTorch's CPU mixed precision does it: bf16 matmuls through oneDNN).



  flops_per_token = 6 * P_matmul + 12 * layers * hidden * seq_len   (gpt)
  flops_per_token = 6 * P_matmul                                    (mlp)
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description="PyTorch single-process training benchmark peer")
    pc.add_common_args(p)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--autocast-bf16", action="store_true",
                   help="forward and backward under CPU bf16 autocast")
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error("--threads must be >= 1")
    torch.set_num_threads(args.threads)
    try:
        m, t, model, batches = pc.setup(args)
    except (pc.SpecError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    opt, sched = pc.train.make_optimizer(model, t)
    losses = []

    def step(i):
        inputs, targets = batches.batch(i)
        if args.autocast_bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                losses.append(pc.train.accumulate_grads(model, inputs, targets,
                                                        t.micro_batch))
        else:
            losses.append(pc.train.accumulate_grads(model, inputs, targets, t.micro_batch))
        pc.train.finish_step(model, opt, sched, t)

    for i in range(args.warmup):
        step(i)
    start = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.steps):
        step(i)
    seconds = time.perf_counter() - start

    tokens = t.global_batch * m.seq_len * args.steps
    fpt = pc.flops_per_token(m)
    print(json.dumps({
        "peer": "torch", "mode": "single", "model": m.family,
        "model_yaml": args.model_yaml, "torch_version": torch.__version__,
        "threads": args.threads, "dtype": args.dtype,
        "autocast_bf16": args.autocast_bf16,
        "global_batch": t.global_batch, "micro_batch": t.micro_batch or t.global_batch,
        "seq_len": m.seq_len, "warmup_steps": args.warmup, "steps": args.steps,
        "params_total": sum(p.numel() for p in model.parameters()),
        "params_matmul": pc.matmul_params(m), "flops_per_token": fpt,
        "seconds": seconds, "step_time_s": seconds / args.steps,
        "tokens_per_s": tokens / seconds, "gflops_per_s": fpt * tokens / seconds / 1e9,
        "first_loss": losses[0], "last_loss": losses[-1],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
