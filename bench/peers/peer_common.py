"""Shared setup for the PyTorch benchmark peers (torch_train_bench.py,
torch_ddp_bench.py): model, data and the model-FLOP count.

Model FLOPs (what "achieved GFLOP/s" counts; the Megatron-LM convention,
Narayanan et al. SC'21, eq. 3, which does not halve causal attention):

  flops_per_token = 6 * P_matmul + 12 * L * H * S     (gpt, llama)
  flops_per_token = 6 * P_matmul                      (mlp)

  P_matmul: parameters that take part in matmuls, counted once each:
    gpt: L * (H*3H + H*H + H*F + F*H) + V*H  (the tied LM head counts as a
         matmul; position embeddings, biases and LayerNorm do not)
    llama: L * (H*H + 2*H*KV + H*H + 3*H*F) + V*H, KV = kv_heads * H/heads
         (q, k, v, o; gate, up, down; the LM head, tied or not; grouped-query
         attention's Q K^T and P V still run over all H query features)
    mlp: L * (H*F + F*H) + H*V
  6 = 2 FLOPs per multiply-add x (1 forward + 2 backward matmuls).
  12*L*H*S: QK^T and PV, forward and backward (2 matmuls x 2 FLOPs x 3 passes
  x S*H per token per layer).

Recomputation and optimizer FLOPs are not counted: this is model FLOPs, so
numbers are comparable across implementations.
"""

import os
import sys

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import make_inputs  # noqa: E402
import models  # noqa: E402
import safetensors_io  # noqa: E402
import train  # noqa: E402
from spec import SpecError, parse_spec, validate_training  # noqa: E402

__all__ = ["SpecError", "add_common_args", "setup", "matmul_params", "flops_per_token", "train"]


def matmul_params(m):
    if m.family == "gpt":
        h, f = m.hidden, m.ffn_hidden
        return m.layers * (h * 3 * h + h * h + 2 * h * f) + m.vocab * h
    if m.family == "llama":
        h, f = m.hidden, m.ffn_hidden
        kv = (m.kv_heads or m.heads) * (h // m.heads)
        return m.layers * (2 * h * h + 2 * h * kv + 3 * h * f) + m.vocab * h
    return m.layers * 2 * m.hidden * m.ffn_hidden + m.hidden * m.vocab


def flops_per_token(m):
    attn = 12 * m.layers * m.hidden * m.seq_len if m.family in ("gpt", "llama") else 0
    return 6 * matmul_params(m) + attn


def add_common_args(p):
    p.add_argument("--model-yaml", required=True)
    p.add_argument("--data", help="token file (default: random tokens from --seed)")
    p.add_argument("--data-dtype", choices=["uint16", "uint32"], default="uint16")
    p.add_argument("--init", help="initial weights (default: HF GPT-2 init from the spec seed)")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before timing")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--global-batch", type=int)
    p.add_argument("--micro-batch", type=int, help="0 = no micro-batching")
    p.add_argument("--seed", type=int, default=0, help="seed for generated tokens")


def setup(args):
    """-> (model_cfg, training_cfg, model, TokenBatches); raises SpecError/ValueError."""
    if args.steps < 1 or args.warmup < 0:
        raise ValueError("--steps must be >= 1 and --warmup >= 0")
    m, t = parse_spec(args.model_yaml)
    if args.global_batch is not None:
        t.global_batch = args.global_batch
    if args.micro_batch is not None:
        t.micro_batch = args.micro_batch or None
    validate_training(t, "the spec with command-line overrides")
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    model = models.build_model(m, dtype)
    if args.init:
        tensors, _ = safetensors_io.load(args.init)
        models.load_state(model, tensors, path=f"--init {args.init}")
    else:
        models.init_weights(model, t.seed)
    if args.data:
        tokens = train.load_tokens(args.data, args.data_dtype, m.vocab)
    else:
        n = (args.steps + args.warmup) * t.global_batch * m.seq_len + 1
        tokens = make_inputs.make_tokens(n, m.vocab, args.seed)
    return m, t, model, train.TokenBatches(np.asarray(tokens), m.seq_len, t.global_batch,
                                           seed=t.seed)
