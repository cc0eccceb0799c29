#!/usr/bin/python3
"""PyTorch models exported to ONNX, and their PyTorch training reference.

  /usr/bin/python3 tests/reference/onnx_models.py export --model mlp \
      --out DIR/mlp.onnx [--seed 0] [--training '{"global_batch": 8, ...}']
  /usr/bin/python3 tests/reference/onnx_models.py train --model mlp \
      --init DIR/mlp.init.safetensors --data tokens.bin --steps 10 \
      --log ref.jsonl --sidecar DIR/mlp.yaml

`export` writes MODEL.onnx (torch.onnx.export, opset 13..17, the batch dim
dynamic, parameters under their state-dict names), the YAML Strata reads
beside it (`onnx: {logits: logits}` and the training section) and
MODEL.init.safetensors (the exported weights, for `--init`). `train` trains
the same nn.Module with the data/optimizer contract of train.py and logs one
JSON record per step.

Models (token ids [B, S] -> logits [B, S, V]):
  mlp: embed + pos (a learned [S, H] parameter, broadcast over the batch)
       -> x + fc2(relu(fc1(x))) -> head (nn.Linear layout [out, in]).
  gated: mlp with tanh(h) * sigmoid(h) as the activation.
  gelu_rms: mlp with nn.GELU() (exact, erf) as the activation and a
       hand-written RMS normalisation with a learned gain before the head:
       x / sqrt(mean(x * x, -1) + eps) * w (ONNX ReduceMean, Add, Sqrt, Div,
       Mul by a [H] parameter).
  gpt: models.GPT (GPT-2: learned positions, pre-LN blocks, causal
       attention, GELU tanh, tied head), 2 layers, width 32, opset 17.
"""

import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_inputs  # noqa: E402
import models  # noqa: E402
import safetensors_io  # noqa: E402
import train as reference  # noqa: E402
from spec import _training  # noqa: E402


class MlpLM(nn.Module):
    def __init__(self, vocab=128, seq_len=16, hidden=32, ffn=64):
        super().__init__()
        self.vocab, self.seq_len = vocab, seq_len
        self.embed = nn.Embedding(vocab, hidden)
        # A learned [S, H] table added to every row: ONNX broadcasting.
        self.pos = nn.Parameter(0.02 * torch.randn(seq_len, hidden))
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens, targets=None):
        x = self.embed(tokens) + self.pos
        x = x + self.fc2(torch.relu(self.fc1(x)))
        logits = self.head(x)
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))


class GatedMlpLM(MlpLM):
    """MlpLM with tanh(fc1(x)) * sigmoid(fc1(x)) as its activation (ONNX
    Tanh and Sigmoid, which Strata imports as two-way softmaxes)."""

    def forward(self, tokens, targets=None):
        x = self.embed(tokens) + self.pos
        h = self.fc1(x)
        x = x + self.fc2(torch.tanh(h) * torch.sigmoid(h))
        logits = self.head(x)
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))


class GeluRmsMlpLM(MlpLM):
    """MlpLM with the exact nn.GELU() (ONNX Div, Erf, Add, Mul) and
    x / sqrt(mean(x * x) + eps) * w before the head (ReduceMean, Sqrt, Div,
    Mul by the [H] gain w)."""

    def __init__(self):
        super().__init__()
        self.act = nn.GELU()
        self.w = nn.Parameter(1.0 + 0.1 * torch.randn(self.pos.shape[1]))

    def forward(self, tokens, targets=None):
        x = self.embed(tokens) + self.pos
        x = x + self.fc2(self.act(self.fc1(x)))
        x = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * self.w
        logits = self.head(x)
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))


class GptLM(models.GPT):
    """models.GPT (HF GPT2LMHeadModel semantics), vocab 128, 16 tokens,
    width 32, 4 heads, 2 layers, with HF's init; exported as ids -> logits."""

    def __init__(self):
        super().__init__(128, 16, 32, 4, 2)
        self.vocab, self.seq_len = 128, 16

    def export_forward(self, tokens):
        return self.logits(tokens)


MODELS = {"mlp": (MlpLM, 13), "gated": (GatedMlpLM, 13),
          "gelu_rms": (GeluRmsMlpLM, 13), "gpt": (GptLM, 17)}


def build(name, seed):
    cls, opset = MODELS[name]
    torch.manual_seed(seed)
    model = cls()
    if name == "gpt":
        models.init_weights(model, seed)
    return model, opset


def export(args):
    model, opset = build(args.model, args.seed)
    model.eval()
    if hasattr(model, "export_forward"):
        model.forward = model.export_forward  # ids -> logits, no loss
    tokens = torch.zeros(2, model.seq_len, dtype=torch.long)
    torch.onnx.export(model, (tokens,), args.out, input_names=["tokens"],
                      output_names=["logits"],
                      dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=opset, do_constant_folding=False)
    base = os.path.splitext(args.out)[0]
    training = json.loads(args.training)
    with open(base + ".yaml", "w") as f:
        yaml.safe_dump({"onnx": {"logits": "logits"}, "training": training}, f,
                       sort_keys=False)
    state = {k: v.detach().numpy().copy() for k, v in model.named_parameters()}
    safetensors_io.save(base + ".init.safetensors", state, metadata={"format": "pt"})
    if args.tokens_out:
        make_inputs.write_tokens(args.tokens_out,
                                 make_inputs.make_tokens(args.num_tokens, model.vocab, 1))
    return 0


def train(args):
    model, _ = build(args.model, 0)
    model.train()
    tensors, _ = safetensors_io.load(args.init)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(tensors[name].astype("float32")))
    with open(args.sidecar) as f:
        t = _training(args.sidecar, yaml.safe_load(f))
    torch.manual_seed(t.seed)
    tokens = reference.load_tokens(args.data, "uint16", model.vocab)
    batches = reference.TokenBatches(tokens, model.seq_len, t.global_batch, "random", t.seed)
    with open(args.log, "w") as out:
        reference.train(model, batches, t, args.steps,
                        on_step=lambda r: out.write(json.dumps(r) + "\n"))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--model", choices=sorted(MODELS), required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--training", default='{"global_batch": 8}',
                   help="the sidecar's training: section, as JSON")
    e.add_argument("--tokens-out", help="also write a uint16 token file")
    e.add_argument("--num-tokens", type=int, default=4000)
    t = sub.add_parser("train")
    t.add_argument("--model", choices=sorted(MODELS), required=True)
    t.add_argument("--init", required=True)
    t.add_argument("--data", required=True)
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--log", required=True)
    t.add_argument("--sidecar", required=True, help="the YAML beside the .onnx")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    return export(args) if args.cmd == "export" else train(args)


if __name__ == "__main__":
    sys.exit(main())
