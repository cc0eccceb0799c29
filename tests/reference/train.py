#!/usr/bin/python3
"""Trains a Strata model spec with plain PyTorch and logs per-step losses.

The independent reference for Strata's end-to-end tests:

  /usr/bin/python3 tests/reference/train.py --model-yaml examples/models/gpt-tiny.yaml \
      --init init.safetensors --data tokens.bin --steps 10 --log ref.jsonl

Semantics (the contract Strata must meet):
  * data: S = seq_len, B = global batch. Step i uses samples i*B + j,
    j = 0..B-1, in that order; sample k is the window of S+1 tokens at a:
    inputs tokens[a : a+S], targets tokens[a+1 : a+S+1]. With
    --data-order random (the default, nanoGPT's random windows)
    a = splitmix64(key + k) * (len - S) >> 64, key = splitmix64(seed ^
    0x53414D504C45); with sequential, a = (k mod n) * S, n = (len-1)//S.
  * micro-batching: the step's rows are split in order into B/mb micro-batches;
    gradients accumulate; each micro-batch loss is scaled by mb/B, so the step
    loss is the mean over every token of the global batch.
  * optimizer: torch AdamW or SGD(momentum), weight decay only on rank >= 2
    parameters (matrices, embeddings), none on biases and LayerNorm params.
  * lr: LambdaLR with lr_factor() below; the logged lr is the one used by the
    step's update.
  * grad clip: clip_grad_norm_ after accumulation when grad_clip > 0; grad_norm
    logged is the pre-clip global L2 norm (logged even when clipping is off).
  * log: one JSON object per step {"step", "loss", "lr", "grad_norm"}, steps
    numbered from 1 (as Strata logs them).
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import safetensors_io  # noqa: E402
from spec import SpecError, parse_spec, validate_training  # noqa: E402


def lr_factor(step, t):
    """Multiplier on the base lr for 0-based `step` (the one place to align
    with docs/runtime.md). Warmup is linear from lr/warmup at step 0 to lr at
    step warmup-1; decay progress runs from 0 at step=warmup to 1 at total."""
    if step < t.warmup_steps:
        return (step + 1) / t.warmup_steps
    if t.schedule == "constant":
        return 1.0
    progress = (step - t.warmup_steps) / max(1, t.total_steps - t.warmup_steps)
    progress = min(1.0, max(0.0, progress))
    floor = t.min_lr / t.lr if t.lr else 0.0
    if t.schedule == "cosine":
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 + (floor - 1.0) * progress  # linear


def param_groups(model, weight_decay):
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model, t):
    groups = param_groups(model, t.weight_decay)
    if t.optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), eps=t.eps)
    else:
        opt = torch.optim.SGD(groups, lr=t.lr, momentum=t.momentum)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, t))
    return opt, sched


MASK64 = (1 << 64) - 1


def splitmix64(x):
    """The splitmix64 output function of state x (docs/runtime.md)."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


TRAIN_STREAM, EVAL_STREAM = 0x53414D504C45, 0x4556414C


def sample_key(seed, stream=TRAIN_STREAM):
    return splitmix64((seed & MASK64) ^ stream)


class TokenBatches:
    """The data contract above over a flat token array."""

    def __init__(self, tokens, seq_len, global_batch, order="random", seed=0,
                 stream=TRAIN_STREAM):
        self.tokens = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
        self.seq_len, self.global_batch = seq_len, global_batch
        self.num_samples = (len(tokens) - 1) // seq_len
        if self.num_samples < 1:
            raise ValueError(f"{len(tokens)} tokens are too few for one sample of "
                             f"seq_len {seq_len} (need at least {seq_len + 1})")
        self.order, self.key = order, sample_key(seed, stream)

    def sample_start(self, k):
        """The first token of sample k (docs/runtime.md)."""
        if self.order == "sequential":
            return (k % self.num_samples) * self.seq_len
        windows = len(self.tokens) - self.seq_len
        return (splitmix64((self.key + k) & MASK64) * windows) >> 64

    def sample_ids(self, step):
        return [step * self.global_batch + j for j in range(self.global_batch)]

    def batch(self, step):
        """-> (inputs [B,S], targets [B,S]) int64."""
        s = self.seq_len
        rows = [self.tokens[a:a + s + 1]
                for a in (self.sample_start(k) for k in self.sample_ids(step))]
        full = torch.stack(rows)
        return full[:, :-1].contiguous(), full[:, 1:].contiguous()


def accumulate_grads(model, inputs, targets, micro_batch):
    """Zeroes grads, runs every micro-batch forward/backward; returns the step
    loss (mean over all tokens of the batch) as a float."""
    for p in model.parameters():
        p.grad = None
    b = inputs.shape[0]
    mb = micro_batch or b
    total = 0.0
    for start in range(0, b, mb):
        loss = model(inputs[start:start + mb], targets[start:start + mb]) * (mb / b)
        loss.backward()
        total += loss.item()
    return total


def global_grad_norm(model):
    norms = [p.grad.detach().norm(2) for p in model.parameters() if p.grad is not None]
    return torch.norm(torch.stack(norms), 2).item() if norms else 0.0


def finish_step(model, opt, sched, t):
    """Clip, update, advance the schedule; -> (lr used, pre-clip grad norm)."""
    if t.grad_clip > 0:
        norm = float(torch.nn.utils.clip_grad_norm_(list(model.parameters()), t.grad_clip))
    else:
        norm = global_grad_norm(model)
    lr = opt.param_groups[0]["lr"]
    opt.step()
    sched.step()
    return lr, norm


def train(model, batches, t, steps, on_step=None):
    """Runs `steps` steps; returns the list of per-step log records."""
    opt, sched = make_optimizer(model, t)
    records = []
    for step in range(steps):
        inputs, targets = batches.batch(step)
        loss = accumulate_grads(model, inputs, targets, t.micro_batch)
        lr, norm = finish_step(model, opt, sched, t)
        rec = {"step": step + 1, "loss": loss, "lr": lr, "grad_norm": norm}
        records.append(rec)
        if on_step:
            on_step(rec)
    return records


def load_tokens(path, dtype, vocab):
    np_dtype = {"uint16": np.uint16, "uint32": np.uint32}[dtype]
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise ValueError(f"--data {path}: {e.strerror}") from None
    itemsize = np.dtype(np_dtype).itemsize
    if size % itemsize:
        raise ValueError(f"--data {path}: {size} bytes is not a whole number of {dtype} tokens "
                         "(is --data-dtype right?)")
    tokens = np.fromfile(path, dtype=np.dtype(np_dtype).newbyteorder("<"))
    if len(tokens) and int(tokens.max()) >= vocab:
        bad = int(np.argmax(tokens >= vocab))
        raise ValueError(f"--data {path}: token {int(tokens[bad])} at index {bad} is >= vocab "
                         f"({vocab}); the file does not match the model (or --data-dtype)")
    return tokens


def _override(t, args):
    for name in ("global_batch", "micro_batch", "optimizer", "lr", "momentum", "beta1", "beta2",
                 "eps", "weight_decay", "schedule", "warmup_steps", "min_lr", "total_steps",
                 "grad_clip", "seed"):
        v = getattr(args, name)
        if v is not None:
            setattr(t, name, v)
    if t.micro_batch is not None and t.micro_batch == 0:
        t.micro_batch = None
    validate_training(t, "the spec with command-line overrides")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-yaml", required=True, help="Strata model spec (model: + training:)")
    p.add_argument("--init", help="initial weights (safetensors); default: HF GPT-2 init from "
                                  "training.seed")
    p.add_argument("--data", required=True, help="flat token file")
    p.add_argument("--data-dtype", choices=["uint16", "uint32"], default="uint16")
    p.add_argument("--data-order", choices=["random", "sequential"], default="random",
                   help="random windows from the seed (default) or consecutive ones")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--log", help="JSONL output (default: stdout)")
    p.add_argument("--save", help="write the final weights here (safetensors, F32)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="compute precision (float64 separates fp32 noise from bugs)")
    g = p.add_argument_group("overrides of the spec's training: section")
    g.add_argument("--global-batch", type=int)
    g.add_argument("--micro-batch", type=int, help="0 = no micro-batching")
    g.add_argument("--optimizer", choices=["adamw", "sgd"])
    g.add_argument("--lr", type=float)
    g.add_argument("--momentum", type=float)
    g.add_argument("--beta1", type=float)
    g.add_argument("--beta2", type=float)
    g.add_argument("--eps", type=float)
    g.add_argument("--weight-decay", type=float)
    g.add_argument("--schedule", choices=["constant", "cosine", "linear"])
    g.add_argument("--warmup-steps", type=int)
    g.add_argument("--min-lr", type=float)
    g.add_argument("--total-steps", type=int)
    g.add_argument("--grad-clip", type=float)
    g.add_argument("--seed", type=int)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.steps < 0 or args.threads < 1:
        print("error: --steps must be >= 0 and --threads >= 1", file=sys.stderr)
        return 2
    try:
        mcfg, t = parse_spec(args.model_yaml)
        _override(t, args)
        torch.set_num_threads(args.threads)
        torch.manual_seed(t.seed)
        dtype = torch.float64 if args.dtype == "float64" else torch.float32
        model = models.build_model(mcfg, dtype)
        if args.init:
            tensors, _ = safetensors_io.load(args.init)
            models.load_state(model, tensors, path=f"--init {args.init}")
        else:
            models.init_weights(model, t.seed)
        tokens = load_tokens(args.data, args.data_dtype, mcfg.vocab)
        batches = TokenBatches(tokens, mcfg.seq_len, t.global_batch, args.data_order,
                               t.seed)
    except (SpecError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    try:
        out = open(args.log, "w") if args.log else sys.stdout
    except OSError as e:
        print(f"error: --log {args.log}: {e.strerror}", file=sys.stderr)
        return 1
    try:
        def write(rec):
            out.write(json.dumps(rec) + "\n")
            out.flush()
        train(model, batches, t, args.steps, on_step=write)
    finally:
        if out is not sys.stdout:
            out.close()
    if args.save:
        try:
            safetensors_io.save(args.save, models.state_numpy(model), metadata={"format": "pt"})
        except OSError as e:
            print(f"error: --save {args.save}: {e.strerror}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
