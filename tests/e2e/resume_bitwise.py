#!/usr/bin/python3
"""--save / --resume continue a run exactly (docs/runtime.md, "Checkpoints").

For each scenario one run trains N = 12 steps uninterrupted; another stops
and resumes from a checkpoint on the way. The logged loss, grad_norm and lr
of every step must be the same digits, and the final checkpoints
(model.safetensors, optimizer.safetensors) the same bytes.

  * gpt-tiny, AdamW with warmup + cosine, clipping and micro-batching, on the
    synthetic stream: 6 steps, then --resume to 12.
  * mlp, SGD with momentum, on a token file whose sample count (100) is not a
    multiple of the global batch (16), so the data order wraps inside a step:
    5 steps, resume to 9, resume to 12.
  * a crash: gpt-tiny with --save-every 4 dies at the start of step 6
    (STRATA_TEST_FAIL, docs/runtime.md); the existing log and the step-4
    checkpoint survive intact, and resuming from it finishes the run exactly
    as the uninterrupted one did.
"""

import json
import os
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import Session, read_log  # noqa: E402

S = Session(__doc__)

N = 12
FIELDS = ("loss", "grad_norm", "lr")


def spec_from_example(example, training):
    with open(os.path.join(S.examples, example)) as f:
        model = yaml.safe_load(f)["model"]
    return S.write_text(example.replace(".yaml", ".resume.yaml"), yaml.safe_dump(
        {"model": model, "training": training}, sort_keys=False))


def files_equal(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def resume(name, spec, stops, data_args, global_batch):
    binary = S.compile(spec, name)
    full_log, full_ckpt = S.path(f"{name}.full.jsonl"), S.path(f"{name}.full.ckpt")
    S.run([binary, *data_args, "--steps", N, "--log", full_log, "--save", full_ckpt])
    full = read_log(full_log, raw=True)
    S.check([r["step"] for r in full] == list(range(1, N + 1)),
            f"{name}: the uninterrupted run logged steps 1..{N}")

    # Leg k trains from stops[k-1] (0 for the first) to stops[k], resuming from
    # the previous leg's checkpoint; the last stop is N.
    begin, prev_ckpt = 0, None
    for k, end in enumerate(stops):
        log, ckpt = S.path(f"{name}.leg{k}.jsonl"), S.path(f"{name}.leg{k}.ckpt")
        resume_args = ["--resume", prev_ckpt] if prev_ckpt else []
        S.run([binary, *data_args, *resume_args, "--steps", end, "--log", log,
               "--save", ckpt])
        leg = read_log(log, raw=True)
        steps = [r["step"] for r in leg]
        S.check(steps == list(range(begin + 1, end + 1)),
                f"{name}: leg {k} logged steps {begin + 1}..{end}", f"got {steps}")
        for field in FIELDS:
            want = [r[field] for r in full[begin:end]]
            got = [r[field] for r in leg]
            S.check(got == want,
                    f"{name}: leg {k} {field} identical, digit for digit, to the "
                    "uninterrupted run",
                    "\n".join(f"step {s}: {g} vs {w}" for s, g, w
                              in zip(steps, got, want) if g != w))
        with open(os.path.join(ckpt, "trainer.json")) as f:
            state = json.load(f)
        S.check(state.get("step") == end
                and state.get("data_position") == end * global_batch,
                f"{name}: leg {k}'s checkpoint records step {end} and "
                f"data_position {end * global_batch}", json.dumps(state))
        begin, prev_ckpt = end, ckpt

    for f in ("model.safetensors", "optimizer.safetensors"):
        S.check(files_equal(os.path.join(full_ckpt, f), os.path.join(prev_ckpt, f)),
                f"{name}: final {f} byte-identical to the uninterrupted run's")
    with open(os.path.join(full_ckpt, "trainer.json")) as fa, \
            open(os.path.join(prev_ckpt, "trainer.json")) as fb:
        a, b = json.load(fa), json.load(fb)
    S.check(a == b, f"{name}: final trainer.json equal", f"{a} vs {b}")


def crash(name):
    binary = S.path(name)   # compiled by the first scenario
    full_log, full_ckpt = S.path(f"{name}.full.jsonl"), S.path(f"{name}.full.ckpt")
    full = read_log(full_log, raw=True)
    log, ckpt = S.path(f"{name}.crash.jsonl"), S.path(f"{name}.crash.ckpt")
    old_log = b'{"step": 1, "loss": 1.5}\n'
    with open(log, "wb") as f:
        f.write(old_log)
    proc = S.run([binary, "--steps", N, "--log", log, "--save", ckpt, "--save-every", 4],
                 expect_ok=False, env={"STRATA_TEST_FAIL": "0:6"})
    S.check(proc.returncode == 3 and "STRATA_TEST_FAIL" in proc.stderr,
            f"{name}: the run dies at the start of step 6 (exit 3)",
            f"exit {proc.returncode}; stderr:\n{proc.stderr}")
    with open(log, "rb") as f:
        S.check(f.read() == old_log, f"{name}: the existing --log keeps its bytes")
    with open(os.path.join(ckpt, "trainer.json")) as f:
        state = json.load(f)
    S.check(state.get("step") == 4, f"{name}: the --save-every checkpoint holds step 4",
            json.dumps(state))

    resumed_log, final = S.path(f"{name}.after-crash.jsonl"), S.path(f"{name}.final.ckpt")
    S.run([binary, "--resume", ckpt, "--steps", N, "--log", resumed_log,
           "--save", final])
    got = [[r[k] for k in FIELDS] for r in read_log(resumed_log, raw=True)]
    want = [[r[k] for k in FIELDS] for r in full[4:]]
    S.check(got == want, f"{name}: steps 5..{N} after the crash repeat the "
            "uninterrupted run digit for digit", f"{got[:2]} vs {want[:2]}")
    for f in ("model.safetensors", "optimizer.safetensors"):
        S.check(files_equal(os.path.join(full_ckpt, f), os.path.join(final, f)),
                f"{name}: final {f} after the crash byte-identical to the "
                "uninterrupted run's")


def main():
    gpt = spec_from_example("gpt-tiny.yaml", {
        "global_batch": 8, "micro_batch": 2,
        "optimizer": {"kind": "adamw", "lr": 3.0e-3, "betas": [0.9, 0.95],
                      "weight_decay": 0.1},
        "schedule": {"kind": "cosine", "warmup_steps": 3, "total_steps": N,
                     "min_lr": 3.0e-4},
        "grad_clip": 0.5, "seed": 21})
    S.case("gpt-tiny adamw, synthetic stream, 6 + 6 steps", resume,
           "gpt", gpt, [6, N], [], 8)
    S.case("gpt-tiny dies at step 6 after --save-every 4, resumes", crash, "gpt")

    mlp = spec_from_example("mlp.yaml", {
        "global_batch": 16, "micro_batch": 8,
        "optimizer": {"kind": "sgd", "lr": 0.3, "momentum": 0.9,
                      "weight_decay": 0.01},
        "schedule": {"kind": "linear", "warmup_steps": 2, "total_steps": N},
        "grad_clip": 1.0, "seed": 22})
    tokens = S.path("mlp.tokens.bin")
    # 100 samples of seq_len 32 need 100 * 32 + 1 tokens.
    S.reference_tool("make_inputs.py", "--model-yaml", mlp, "--tokens-out", tokens,
                     "--num-tokens", "3201", "--pattern", "learnable")
    S.case("mlp sgd, token file wrapping mid-step, 5 + 4 + 3 steps", resume,
           "mlp", mlp, [5, 9, N], ["--data", tokens], 16)
    S.finish()


if __name__ == "__main__":
    main()
