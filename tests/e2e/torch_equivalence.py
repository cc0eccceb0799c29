#!/usr/bin/python3
"""Strata's compiled training binary against the independent PyTorch reference
(tests/reference/train.py): same spec, same initial weights, same token file,
K steps each; every step's loss and grad_norm must agree to 1e-4 relative, the
learning rates to rounding, and the final weights to 1e-5 (relative L2 over
all parameters).

The scenarios between them cover AdamW and SGD with momentum, weight decay,
warmup + cosine and warmup + linear decay, active gradient clipping,
micro-batching (micro_batch < global_batch), uint16 and uint32 token files,
the example spec as shipped, initial weights stored as F64, F16 and BF16,
and two oneDNN threads.

When a comparison fails the driver reruns the reference in float64 and
reports, per field, whether Strata or torch-float32 is further from it, and
which parameters differ most, so that float32 rounding can be told from a
real bug.
"""

import os
import sys

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import Session, latest, read_log, rel_diff  # noqa: E402

STEPS = 10
LOSS_RTOL = 1e-4       # the contract; never loosened
LR_RTOL = 1e-8         # both sides compute lr in double; logs print 9 digits
WEIGHTS_RTOL = 1e-5    # relative L2 distance of all final parameters

S = Session(__doc__)
sys.path.insert(0, S.reference)
import safetensors_io  # noqa: E402


def spec_from_example(example, training):
    """The example's model: section with our own training: section."""
    with open(os.path.join(S.examples, example)) as f:
        model = yaml.safe_load(f)["model"]
    return yaml.safe_dump({"model": model, "training": training}, sort_keys=False)


def log_field(records, key):
    return [float(r[key]) for r in records]


def diagnose(name, spec, ref_args, strata_log, ref_log):
    """Explains a mismatch: runs the reference in float64 and says, for each
    field, at which step Strata first leaves the 1e-4 band and whether it is
    further from the float64 truth than torch-float32 is."""
    log64 = S.path(f"{name}.ref64.jsonl")
    S.reference_tool("train.py", "--model-yaml", spec, *ref_args,
                     "--dtype", "float64", "--log", log64)
    st, r32, r64 = (read_log(p) for p in (strata_log, ref_log, log64))
    lines = []
    for key in ("loss", "grad_norm", "lr"):
        first_bad = None
        worst_strata = worst_torch = 0.0
        for a, b, c in zip(st, r32, r64):
            d = rel_diff(a[key], b[key])
            if first_bad is None and d > LOSS_RTOL:
                first_bad = (a["step"], a[key], b[key], c[key])
            worst_strata = max(worst_strata, rel_diff(a[key], c[key]))
            worst_torch = max(worst_torch, rel_diff(b[key], c[key]))
        verdict = ("Strata is no further from float64 than torch-float32: rounding"
                   if worst_strata <= 4 * worst_torch + 1e-7 else
                   "Strata is further from float64 than torch-float32: a real difference")
        where = ("no step beyond 1e-4" if first_bad is None else
                 "first beyond 1e-4 at step %d: strata %.9g, torch-f32 %.9g, torch-f64 %.9g"
                 % first_bad)
        lines.append(f"{key}: {where}; worst vs float64: strata {worst_strata:.3g}, "
                     f"torch-f32 {worst_torch:.3g}; {verdict}")
    return "\n".join(lines)


def weight_distance(strata_file, ref_file):
    """(global relative L2 distance, per-tensor report, names equal?)"""
    a, _ = safetensors_io.load(strata_file)
    b, _ = safetensors_io.load(ref_file)
    if sorted(a) != sorted(b):
        return None, (f"names differ: only in strata {sorted(set(a) - set(b))}, "
                      f"only in reference {sorted(set(b) - set(a))}")
    num = den = 0.0
    per = []
    for k in sorted(a):
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        if x.shape != y.shape:
            return None, f"{k}: shape {x.shape} vs {y.shape}"
        d2 = float(np.sum((x - y) ** 2))
        num += d2
        den += float(np.sum(y ** 2))
        per.append((np.sqrt(d2 / max(float(np.sum(y ** 2)), 1e-300)),
                    float(np.max(np.abs(x - y))), k))
    per.sort(reverse=True)
    report = "tensors furthest apart (rel L2, max abs): " + ", ".join(
        f"{k} ({r:.2e}, {m:.2e})" for r, m, k in per[:4])
    return np.sqrt(num / den), report


def equivalence(name, spec_text, init_seed, token_args, data_dtype, expect):
    spec = S.write_text(f"{name}.yaml", spec_text)
    init = S.path(f"{name}.init.safetensors")
    tokens = S.path(f"{name}.tokens.bin")
    S.reference_tool("make_inputs.py", "--model-yaml", spec, "--init-out", init,
                     "--seed", str(init_seed), "--tokens-out", tokens,
                     "--token-dtype", data_dtype, *token_args)
    binary = S.compile(spec, name)

    strata_log, ref_log = S.path(f"{name}.strata.jsonl"), S.path(f"{name}.ref.jsonl")
    ckpt, ref_weights = S.path(f"{name}.ckpt"), S.path(f"{name}.ref.safetensors")
    S.run([binary, "--init", init, "--data", tokens, "--data-dtype", data_dtype,
           "--steps", STEPS, "--log", strata_log, "--save", ckpt])
    ref_args = ["--init", init, "--data", tokens, "--data-dtype", data_dtype,
                "--steps", str(STEPS)]
    S.reference_tool("train.py", "--model-yaml", spec, *ref_args,
                     "--log", ref_log, "--save", ref_weights)

    st = read_log(strata_log)
    S.check([r["step"] for r in st] == list(range(1, STEPS + 1)),
            f"{name}: Strata logged steps 1..{STEPS}",
            f"got steps {[r['step'] for r in st]}")

    matched = compare_logs(f"{name}: loss and grad_norm match torch at every step "
                           f"(rtol {LOSS_RTOL:g})", strata_log, ref_log, LOSS_RTOL)
    lr_ok = compare_logs(f"{name}: lr matches torch's LambdaLR at every step "
                         f"(rtol {LR_RTOL:g})", strata_log, ref_log, LR_RTOL, "lr")
    if not (matched and lr_ok):
        print(diagnose(name, spec, ref_args, strata_log, ref_log))

    dist, report = weight_distance(os.path.join(latest(ckpt), "model.safetensors"),
                                   ref_weights)
    S.check(dist is not None and dist <= WEIGHTS_RTOL,
            f"{name}: final weights match torch's (relative L2 "
            f"{'n/a' if dist is None else f'{dist:.2e}'} <= {WEIGHTS_RTOL:g})", report)

    # The scenario must exercise what it claims to, or a match proves little.
    losses, norms, lrs = (log_field(st, k) for k in ("loss", "grad_norm", "lr"))
    if "clip" in expect:
        S.check(max(norms) > expect["clip"],
                f"{name}: clipping is active (max grad_norm {max(norms):.3f} > "
                f"grad_clip {expect['clip']})")
    if "warmup" in expect:
        w = expect["warmup"]
        S.check(all(lrs[i] < lrs[i + 1] for i in range(w - 1))
                and all(lrs[i] > lrs[i + 1] for i in range(w, STEPS - 1)),
                f"{name}: lr warms up for {w} steps then decays", f"lr {lrs}")
    if "loss_drop" in expect:
        drop = losses[0] - losses[-1]
        S.check(drop > expect["loss_drop"],
                f"{name}: the loss moves ({losses[0]:.3f} -> {losses[-1]:.3f}), "
                f"so the comparison sees the updates")
    return {"name": name, "spec": spec, "binary": binary, "init": init,
            "tokens": tokens, "data_dtype": data_dtype, "strata_log": strata_log,
            "ref_log": ref_log}


def compare_logs(label, first, second, rtol, fields="loss,grad_norm"):
    """compare_losses.py as one check; its table is shown when it fails."""
    cmp = S.reference_tool("compare_losses.py", first, second, "--rtol", str(rtol),
                           "--fields", fields, expect_ok=False)
    return S.check(cmp.returncode == 0, label, cmp.stdout + cmp.stderr)


def variants(base):
    """The same training from init files in F64, F16 and BF16 (converted to
    f32 on load, by Strata and by the reference alike), and with two oneDNN
    threads."""
    name, binary = base["name"], base["binary"]
    data = ["--data", base["tokens"], "--data-dtype", base["data_dtype"],
            "--steps", str(STEPS)]
    tensors, _ = safetensors_io.load(base["init"])
    for dtype in ("F64", "F16", "BF16"):
        init = S.path(f"{name}.init.{dtype}.safetensors")
        safetensors_io.save(init, tensors, dtype=dtype)
        log, ref_log = S.path(f"{name}.{dtype}.jsonl"), S.path(f"{name}.{dtype}.ref.jsonl")
        S.run([binary, "--init", init, *data, "--log", log])
        if dtype == "F64":
            # float32 -> float64 -> float32 is exact: the very same run.
            got = [(r["loss"], r["grad_norm"]) for r in read_log(log, raw=True)]
            want = [(r["loss"], r["grad_norm"])
                    for r in read_log(base["strata_log"], raw=True)]
            S.check(got == want, f"{name}: an F64 copy of the init file gives the "
                    "F32 run's log digit for digit", f"{got[:3]} vs {want[:3]}")
            continue
        S.reference_tool("train.py", "--model-yaml", base["spec"], "--init", init,
                         *data, "--log", ref_log)
        compare_logs(f"{name}: {dtype} init file, loss and grad_norm match torch "
                     f"(rtol {LOSS_RTOL:g})", log, ref_log, LOSS_RTOL)
        # Rounding the weights moves the first loss by about its last f32
        # digit, which can land on the same float: compare every step.
        got = [(r["loss"], r["grad_norm"]) for r in read_log(log)]
        same = [(r["loss"], r["grad_norm"]) for r in read_log(base["strata_log"])]
        S.check(got != same, f"{name}: the {dtype} weights were used (the run's "
                "losses and grad norms differ from the F32 run's)")
    log = S.path(f"{name}.threads2.jsonl")
    S.run([binary, "--init", base["init"], *data, "--threads", 2, "--log", log])
    compare_logs(f"{name}: --threads 2, loss and grad_norm match torch "
                 f"(rtol {LOSS_RTOL:g})", log, base["ref_log"], LOSS_RTOL)


def main():
    gpt = spec_from_example("gpt-tiny.yaml", {
        "global_batch": 8, "micro_batch": 2,
        "optimizer": {"kind": "adamw", "lr": 3.0e-3, "betas": [0.9, 0.95],
                      "eps": 1.0e-8, "weight_decay": 0.1},
        "schedule": {"kind": "cosine", "warmup_steps": 3, "total_steps": STEPS,
                     "min_lr": 3.0e-4},
        "grad_clip": 0.5, "seed": 5})
    base = {}
    S.case("gpt-tiny adamw cosine clip microbatch uint16",
           lambda: base.update(equivalence(
               "gpt_adamw", gpt, 3, ["--num-tokens", "20000", "--pattern", "learnable"],
               "uint16", {"clip": 0.5, "warmup": 3, "loss_drop": 0.5})))
    if base:
        S.case("gpt-tiny from F64/F16/BF16 init files, and --threads 2", variants, base)

    mlp = spec_from_example("mlp.yaml", {
        "global_batch": 16, "micro_batch": 4,
        "optimizer": {"kind": "sgd", "lr": 0.5, "momentum": 0.9, "weight_decay": 0.01},
        "schedule": {"kind": "linear", "warmup_steps": 2, "total_steps": 8,
                     "min_lr": 0.05},
        "grad_clip": 0.1, "seed": 11})
    S.case("mlp sgd-momentum linear clip microbatch uint32", equivalence,
           "mlp_sgd", mlp, 4, ["--num-tokens", "6000", "--pattern", "learnable",
                               "--token-seed", "2"],
           "uint32", {"clip": 0.1, "loss_drop": 0.05})

    with open(os.path.join(S.examples, "gpt-tiny.yaml")) as f:
        shipped = f.read()
    S.case("gpt-tiny.yaml as shipped, random tokens", equivalence,
           "gpt_shipped", shipped, 0, ["--num-tokens", "5000", "--token-seed", "3"],
           "uint16", {})
    S.finish()


if __name__ == "__main__":
    main()
