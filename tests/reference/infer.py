#!/usr/bin/python3
"""Evaluation and greedy generation with the PyTorch reference model, for
checking Strata's --eval-data losses and --generate output.

  /usr/bin/python3 infer.py eval --model-yaml M --weights W.safetensors \\
      --data val.bin --batches K [--seed S] [--data-order random]
      -> {"loss": mean over K global batches of the eval stream}
  /usr/bin/python3 infer.py greedy --model-yaml M --weights W.safetensors \\
      --prompt-ids 1,2,3 --count N
      -> the prompt and N tokens, each the argmax of the full forward's
         logits at the last position (no cache: the definition)

Eval batches (docs/runtime.md): batch b holds samples b*B + j of the eval
stream, whose random key is splitmix64(seed ^ 0x4556414C), the same windows
at every evaluation. Weights may be Strata's or Hugging Face's names.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import safetensors_io  # noqa: E402
import train  # noqa: E402
from spec import parse_spec  # noqa: E402


def load(model_yaml, weights):
    mcfg, t = parse_spec(model_yaml)
    model = models.build_model(mcfg)
    tensors, _ = safetensors_io.load(weights)
    models.load_state(model, tensors, path=weights)
    model.eval()
    return mcfg, t, model


def evaluate(model, mcfg, t, tokens, batches, order, seed):
    data = train.TokenBatches(tokens, mcfg.seq_len, t.global_batch, order, seed,
                              stream=train.EVAL_STREAM)
    with torch.no_grad():
        losses = [float(model(*data.batch(b))) for b in range(batches)]
    return sum(losses) / len(losses)


def greedy(model, prompt, count, seq_len):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(count):
            logits = model.logits(torch.tensor([ids[-seq_len:]]))
            ids.append(int(torch.argmax(logits[0, -1])))
    return ids


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("eval", "greedy"):
        s = sub.add_parser(name)
        s.add_argument("--model-yaml", required=True)
        s.add_argument("--weights", required=True)
    e = sub.choices["eval"]
    e.add_argument("--data", required=True)
    e.add_argument("--data-dtype", choices=["uint16", "uint32"], default="uint16")
    e.add_argument("--batches", type=int, default=8)
    e.add_argument("--seed", type=int)
    e.add_argument("--data-order", choices=["random", "sequential"], default="random")
    g = sub.choices["greedy"]
    g.add_argument("--prompt-ids", required=True)
    g.add_argument("--count", type=int, required=True)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    mcfg, t, model = load(args.model_yaml, args.weights)
    if args.cmd == "eval":
        tokens = train.load_tokens(args.data, args.data_dtype, mcfg.vocab)
        seed = t.seed if args.seed is None else args.seed
        print(json.dumps({"loss": evaluate(model, mcfg, t, tokens, args.batches,
                                           args.data_order, seed)}))
    else:
        prompt = [int(x) for x in args.prompt_ids.split(",")]
        print(" ".join(map(str, greedy(model, prompt, args.count, mcfg.seq_len))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
