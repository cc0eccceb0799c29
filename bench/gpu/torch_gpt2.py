#!/usr/bin/env python3
"""PyTorch peer of the GPU benchmark: GPT-2 124M training steps on one GPU.

  python3 bench/gpu/torch_gpt2.py --mode eager|compile --micro-batch 8 \
      --grad-accum 2 [--steps 12] [--seq 1024]

nanoGPT's model and training step as people run it for speed: bf16 autocast,
scaled_dot_product_attention (causal; cuDNN/flash), fused AdamW (lr 6e-4,
betas 0.9/0.95, weight decay 0.1 on matrices), gradient clipping at 1.0,
micro-batch x gradient accumulation over random tokens; --mode compile wraps
the model in torch.compile. Prints the median step after two warm-up steps
as `RESULT {"tokens_per_s": ..., "step_ms": ..., "mfu": ...}`, MFU by
nanoGPT's count (6N + 12 L H Q T per token, N without the position table)
against 989.5 TFLOP/s (H100/H200 dense bf16).
"""

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2)
                   for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)),
                                        approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=50257, seq=1024, d=768, h=12, layers=12):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, h) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)),
                               targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--grad-accum", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    model = GPT(seq=a.seq).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    n = n_params - model.wpe.weight.numel()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), fused=True)
    step_model = torch.compile(model) if a.mode == "compile" else model
    gen = torch.Generator(device=dev).manual_seed(1)
    times = []
    for step in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.grad_accum):
            idx = torch.randint(0, 50257, (a.micro_batch, a.seq + 1),
                                device=dev, generator=gen)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(idx[:, :-1], idx[:, 1:]) / a.grad_accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        print(f"step {step + 1}: {1e3 * times[-1]:.2f} ms, loss "
              f"{loss.item() * a.grad_accum:.4f}", flush=True)
    dt = statistics.median(times[2:])
    tokens = a.micro_batch * a.grad_accum * a.seq
    flops_per_token = 6 * n + 12 * 12 * 12 * 64 * a.seq
    print("RESULT " + json.dumps({
        "tokens_per_s": tokens / dt, "step_ms": 1e3 * dt,
        "mfu": flops_per_token * tokens / dt / 989.5e12,
        "params": n_params, "mode": a.mode}))


if __name__ == "__main__":
    main()
