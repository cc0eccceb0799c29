#!/usr/bin/python3
"""Writes deterministic test inputs for a Strata model spec.

  /usr/bin/python3 tests/reference/make_inputs.py --model-yaml M.yaml \
      --init-out init.safetensors --seed 0 \
      --tokens-out tokens.bin --num-tokens 4097 --token-seed 1 [--pattern random|learnable]

--init-out: F32 safetensors with the HF GPT-2 init recipe (models.init_weights)
drawn from --seed. --tokens-out: little-endian uint16 (or --token-dtype uint32)
tokens in [0, vocab); `random` is i.i.d. uniform from numpy's PCG64(--token-seed),
`learnable` is a noisy periodic sequence whose loss a working trainer drives down.
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import safetensors_io  # noqa: E402
from spec import SpecError, parse_spec  # noqa: E402


def make_tokens(n, vocab, seed, pattern="random"):
    rng = np.random.default_rng(seed)
    if pattern == "random":
        return rng.integers(0, vocab, size=n, dtype=np.int64)
    # A repeating random "sentence" with 5% of tokens replaced by noise: the
    # next token is predictable from the current one most of the time.
    period = min(vocab, 37)
    motif = rng.integers(0, vocab, size=period)
    toks = motif[np.arange(n) % period].copy()
    noise = rng.random(n) < 0.05
    toks[noise] = rng.integers(0, vocab, size=int(noise.sum()))
    return toks


def write_tokens(path, tokens, dtype="uint16"):
    np_dtype = np.dtype({"uint16": "<u2", "uint32": "<u4"}[dtype])
    if len(tokens) and int(np.max(tokens)) > np.iinfo(np_dtype).max:
        raise ValueError(f"tokens up to {int(np.max(tokens))} do not fit {dtype}")
    np.asarray(tokens).astype(np_dtype).tofile(path)


def make_init(model_cfg, seed):
    model = models.build_model(model_cfg, torch.float32)
    models.init_weights(model, seed)
    return models.state_numpy(model)


def main(argv=None):
    p = argparse.ArgumentParser(description="deterministic init weights and token files")
    p.add_argument("--model-yaml", required=True)
    p.add_argument("--init-out", help="safetensors file to write")
    p.add_argument("--seed", type=int, default=0, help="weight init seed")
    p.add_argument("--tokens-out", help="token file to write")
    p.add_argument("--num-tokens", type=int, default=0)
    p.add_argument("--token-seed", type=int, default=1)
    p.add_argument("--token-dtype", choices=["uint16", "uint32"], default="uint16")
    p.add_argument("--pattern", choices=["random", "learnable"], default="random")
    args = p.parse_args(argv)
    if not args.init_out and not args.tokens_out:
        p.error("nothing to do: give --init-out and/or --tokens-out")
    try:
        mcfg, _ = parse_spec(args.model_yaml)
        if args.init_out:
            safetensors_io.save(args.init_out, make_init(mcfg, args.seed),
                                metadata={"format": "pt", "seed": str(args.seed)})
        if args.tokens_out:
            if args.num_tokens < mcfg.seq_len + 1:
                raise ValueError(f"--num-tokens must be at least seq_len+1 = {mcfg.seq_len + 1}")
            if args.token_dtype == "uint16" and mcfg.vocab > 65536:
                raise ValueError(f"vocab {mcfg.vocab} does not fit uint16; use --token-dtype uint32")
            write_tokens(args.tokens_out,
                         make_tokens(args.num_tokens, mcfg.vocab, args.token_seed, args.pattern),
                         args.token_dtype)
    except (SpecError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
