#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo) peer for Strata's data-parallel benchmark.

  /usr/bin/python3 bench/peers/torch_ddp_bench.py --model-yaml M.yaml \
      [--world-size 2] [--data tokens.bin] [--steps 10] [--warmup 2] [--log ddp.jsonl]

Spawns --world-size processes (torch.multiprocessing, TCP rendezvous on
127.0.0.1 only), one thread each. Every step, rank r trains on rows
[r*B/W, (r+1)*B/W) of the step's global batch (the reference's data order);
DDP averages gradients, so the update equals single-process training on the
whole batch. --micro-batch is rows per micro-batch on each rank (gradient sync
only on the last micro-batch, via no_sync()).

Prints one JSON object from rank 0: aggregate tokens_per_s =
global_batch * seq_len * steps / seconds (timed between barriers, slowest rank)
and gflops_per_s with the model-FLOP formula in peer_common.py. --log writes
the per-step global mean loss (reduced after timing, so it does not perturb
it) as JSONL, comparable with tests/reference/train.py via compare_losses.py.
"""

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common as pc  # noqa: E402


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.world_size)
    try:
        run_rank(rank, args)
    finally:
        dist.destroy_process_group()


def run_rank(rank, args):
    world = args.world_size
    m, t, model, batches = pc.setup(args)
    local = t.global_batch // world
    mb = min(t.micro_batch or local, local)
    ddp = DDP(model)  # broadcasts rank 0's weights; all ranks init identically anyway
    opt, sched = pc.train.make_optimizer(model, t)
    local_losses = []

    def step(i):
        inputs, targets = batches.batch(i)
        inputs, targets = inputs[rank * local:(rank + 1) * local], targets[rank * local:(rank + 1) * local]
        for p in model.parameters():
            p.grad = None
        total = 0.0
        for start in range(0, local, mb):
            last = start + mb >= local
            ctx = ddp.no_sync() if not last else _null()
            with ctx:
                loss = ddp(inputs[start:start + mb], targets[start:start + mb]) * (mb / local)
                loss.backward()
            total += loss.item()
        local_losses.append(total)
        pc.train.finish_step(model, opt, sched, t)

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    start = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.steps):
        step(i)
    dist.barrier()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    losses = torch.tensor(local_losses, dtype=torch.float64)
    dist.all_reduce(losses)
    losses /= world
    if rank != 0:
        return
    seconds = elapsed.item()
    if args.log:
        with open(args.log, "w") as f:
            for i, loss in enumerate(losses.tolist()):
                f.write(json.dumps({"step": i + 1, "loss": loss}) + "\n")
    tokens = t.global_batch * m.seq_len * args.steps
    fpt = pc.flops_per_token(m)
    print(json.dumps({
        "peer": "torch", "mode": "ddp-gloo", "model": m.family,
        "model_yaml": args.model_yaml, "torch_version": torch.__version__,
        "world_size": world, "threads_per_rank": 1, "dtype": args.dtype,
        "global_batch": t.global_batch, "micro_batch_per_rank": mb,
        "seq_len": m.seq_len, "warmup_steps": args.warmup, "steps": args.steps,
        "params_matmul": pc.matmul_params(m), "flops_per_token": fpt,
        "seconds": seconds, "step_time_s": seconds / args.steps,
        "tokens_per_s": tokens / seconds, "gflops_per_s": fpt * tokens / seconds / 1e9,
        "first_loss": losses[0].item(), "last_loss": losses[-1].item(),
    }), flush=True)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description="PyTorch DDP (gloo) training benchmark peer")
    pc.add_common_args(p)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--log", help="rank 0 writes per-step global mean losses here (JSONL)")
    args = p.parse_args(argv)
    if args.world_size < 1:
        p.error("--world-size must be >= 1")
    # Validate in the parent so a bad spec is one clear message, not W tracebacks.
    try:
        m, t, _, _ = pc.setup(args)
    except (pc.SpecError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if t.global_batch % args.world_size:
        print(f"error: global batch {t.global_batch} is not divisible by --world-size "
              f"{args.world_size}; change --global-batch", file=sys.stderr)
        return 1
    local = t.global_batch // args.world_size
    if t.micro_batch and t.micro_batch < local and local % t.micro_batch:
        print(f"error: --micro-batch {t.micro_batch} does not divide the {local} rows per rank",
              file=sys.stderr)
        return 1
    if os.path.isdir("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo on loopback
    try:
        mp.spawn(worker, args=(args, free_port()), nprocs=args.world_size, join=True)
    except mp.ProcessRaisedException as e:
        print(f"error: a rank failed:\n{e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
