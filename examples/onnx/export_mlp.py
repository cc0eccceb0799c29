#!/usr/bin/python3
"""Exports a small PyTorch MLP language model to ONNX for Strata.

  /usr/bin/python3 examples/onnx/export_mlp.py        # writes examples/onnx/mlp.onnx
  strata import examples/onnx/mlp.onnx               # reads mlp.yaml beside it
  strata compile examples/onnx/mlp.onnx --cluster local:2 --pin tp=2 -o mlp
  strata import examples/onnx/mlp.onnx --weights-out mlp.safetensors -o /dev/null
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun --oversubscribe -np 2 ./mlp --init mlp.safetensors --steps 20

The model reads token ids [batch, 16] and returns logits [batch, 16, 128];
Strata adds the cross-entropy loss against the next tokens. Export with the
batch dim dynamic (so the shape arithmetic is recomputed for the batch Strata
trains with) and constant folding off (so nn.Linear keeps its weight under
its state-dict name; Strata reads the Transpose it exports as a transposed
matmul).
"""

import argparse
import os

import torch
import torch.nn as nn


class MlpLM(nn.Module):
    def __init__(self, vocab=128, hidden=32, ffn=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        x = x + self.fc2(torch.relu(self.fc1(x)))
        return self.head(x)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="export the example MLP to ONNX")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "mlp.onnx"))
    out = p.parse_args().out
    torch.manual_seed(0)
    torch.onnx.export(MlpLM(), (torch.zeros(2, 16, dtype=torch.long),), out,
                      input_names=["tokens"], output_names=["logits"],
                      dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=13, do_constant_folding=False)
    print(f"wrote {out}")
