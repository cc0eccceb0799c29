#!/usr/bin/python3
"""The example specs, compiled and trained on the built-in synthetic Markov
stream (no --data, no --init), learn: the loss starts near ln(vocab) and the
mean of the last five steps ends well below the first step's loss.

Also checks the log records themselves (docs/runtime.md, "Logs"): consecutive
steps, finite values, the token and sample counters, and that --seed changes
the stream and the initial weights while the same seed reproduces a run.

Thresholds are set from observed runs with about 40% margin: after 150 steps
gpt-tiny falls by ~1.8 nats (6.24 -> 4.45), mlp by ~2.4 (5.55 -> 3.15).
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import Session, read_log  # noqa: E402

S = Session(__doc__)

STEPS = 150


def falls(example, vocab, seq_len, global_batch, min_drop):
    name = os.path.splitext(example)[0]
    binary = S.compile(os.path.join(S.examples, example), name)
    log = S.path(f"{name}.jsonl")
    S.run([binary, "--steps", STEPS, "--log", log])
    recs = read_log(log)

    S.check([r["step"] for r in recs] == list(range(1, STEPS + 1)),
            f"{name}: log holds steps 1..{STEPS} in order")
    bad = [r["step"] for r in recs
           if not all(isinstance(r.get(k), (int, float)) and math.isfinite(r[k])
                      for k in ("loss", "lr", "grad_norm", "step_time_s", "tokens_per_s"))]
    S.check(not bad, f"{name}: loss, lr, grad_norm, step_time_s, tokens_per_s are "
            "finite numbers in every record", f"bad steps: {bad[:10]}")
    S.check(all(r.get("tokens") == global_batch * seq_len
                and r.get("samples_seen") == r["step"] * global_batch
                for r in recs),
            f"{name}: tokens = B*S = {global_batch * seq_len} and "
            "samples_seen = step*B in every record",
            f"first record: {recs[0] if recs else None}")

    losses = [r["loss"] for r in recs]
    first, tail = losses[0], sum(losses[-5:]) / 5
    S.check(abs(first - math.log(vocab)) < 0.15,
            f"{name}: first loss {first:.3f} is near ln(vocab) = {math.log(vocab):.3f} "
            "(a freshly initialised model)")
    S.check(tail < first - min_drop,
            f"{name}: loss falls: mean of last 5 steps {tail:.3f} < first "
            f"{first:.3f} - {min_drop}")
    mid = sum(losses[STEPS // 2 - 5:STEPS // 2]) / 5
    S.check(tail < mid, f"{name}: still falling in the second half "
            f"({mid:.3f} at step {STEPS // 2} -> {tail:.3f})")
    return binary, losses


def seeds(binary, losses, name):
    """--seed picks the stream and the init; equal seeds give equal runs."""
    again, other = S.path(f"{name}.again.jsonl"), S.path(f"{name}.seed99.jsonl")
    S.run([binary, "--steps", 3, "--log", again])
    S.run([binary, "--steps", 3, "--seed", 99, "--log", other])
    a = [r["loss"] for r in read_log(again)]
    b = [r["loss"] for r in read_log(other)]
    S.check(a == losses[:3], f"{name}: a second run with the same seed repeats "
            "the losses exactly", f"{a} vs {losses[:3]}")
    S.check(len(b) == 3 and b[0] != a[0],
            f"{name}: --seed 99 gives another run (step-0 loss {b[0] if b else None} "
            f"vs {a[0]})")


def main():
    result = {}

    def run_gpt():
        result["gpt"] = falls("gpt-tiny.yaml", 512, 64, 8, 1.0)

    def run_mlp():
        result["mlp"] = falls("mlp.yaml", 256, 32, 16, 1.4)

    S.case("gpt-tiny on the synthetic stream", run_gpt)
    S.case("mlp on the synthetic stream", run_mlp)
    if "mlp" in result:
        S.case("mlp --seed", seeds, *result["mlp"], "mlp")
    S.finish()


if __name__ == "__main__":
    main()
