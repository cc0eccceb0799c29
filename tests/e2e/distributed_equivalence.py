#!/usr/bin/python3
"""Every parallel plan kind on real MPI ranks trains exactly like one rank.

A 4-layer variant of gpt-tiny (AdamW with weight decay, warmup + cosine,
gradient clipping that is active in some steps and not in others) is compiled
with `strata compile --cluster local:N` and every plan field pinned, so the
planner has no choice left; the printed `plan:` line must show the pins. Each
plan trains 10 steps under `mpirun --oversubscribe` from the same --init
weights and token file, and every step's loss and grad_norm must agree to 1e-4
relative with BOTH the one-rank Strata run and the PyTorch reference
(tests/reference/train.py); lr must equal the one-rank run's digit for digit.

Groups (--group, repeatable; all by default), one ctest entry each so that
ctest can run them side by side:

  data      dp=2 with zero 0/1/2/3, dp=2 x tp=2, dp=2 x pp=2
  model     tp=2, tp=2 sp, pp=2 1f1b/gpipe/interleaved(vpp=2), tp=2 x pp=2
  llama     a 4-layer llama (grouped-query attention: 4 query heads, 2 kv
            heads; untied head; vocab 255) on one rank and under dp=2 ZeRO-2
            and ZeRO-3,
            tp=2 (kv heads split), tp=4 sp (kv heads replicated), pp=2 1f1b
            with full recomputation, pp=2 interleaved, dp=2 x tp=2 sp ZeRO-1
            with selective recomputation, tp=2 x pp=2; the tp=4 run's
            per-rank checkpoint reassembles to the one-rank weights under
            the Hugging Face names; --init skips HF's rotary inv_freq
            buffers, loads BF16 files exactly and still rejects other extra
            tensors.
  runtime   the mlp preset with vocab 255 (padded rows under tp=2) on dp=2,
            tp=2 and dp=2 x tp=2; --save/--resume across ranks (10 steps vs
            5 + 5, digit for digit, final rank files byte-identical) for
            dp=2 x tp=2 and pp=2; the per-rank checkpoint layout (rank files,
            index.json, and the weights and AdamW moments reassembled from
            the pieces equal to the one-rank run's); a rank-count mismatch;
            a rank that dies mid-run (STRATA_TEST_FAIL).
"""

import json
import os
import re
import sys
import time

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import (  # noqa: E402
    CRASH_MARKERS, MPI_ROOT_ENV, CommandFailed, Session, latest, read_log,
    take_groups)

GROUPS = ("data", "model", "runtime", "llama")


SELECTED = take_groups(GROUPS)
S = Session(__doc__)
sys.path.insert(0, S.reference)
import safetensors_io  # noqa: E402

STEPS = 10
RTOL = 1e-4            # the contract; never loosened
WEIGHTS_RTOL = 1e-5    # relative L2 of reassembled final weights
STATE_RTOL = 1e-4      # relative L2 of reassembled AdamW moments
# A dead or mismatched rank must end the job this fast (seconds).
FAILURE_DEADLINE_S = 30
MPI_ENV = MPI_ROOT_ENV

GPT_BATCH = 8
GPT_CLIP = 2.0
GPT_SPEC = {
    "model": {"family": "gpt", "vocab": 512, "seq_len": 64, "hidden": 64,
              "heads": 4, "layers": 4, "dtype": "float32"},
    "training": {
        "global_batch": GPT_BATCH, "micro_batch": 2,
        "optimizer": {"kind": "adamw", "lr": 3.0e-3, "betas": [0.9, 0.95],
                      "eps": 1.0e-8, "weight_decay": 0.1},
        "schedule": {"kind": "cosine", "warmup_steps": 3, "total_steps": STEPS,
                     "min_lr": 3.0e-4},
        "grad_clip": GPT_CLIP, "seed": 5}}

# vocab 255 does not split evenly over tp=2: rank 1's rows of embed/head
# carry one padding row.
MLP_BATCH = 16
MLP_SPEC = {
    "model": {"family": "mlp", "vocab": 255, "seq_len": 32, "hidden": 64,
              "layers": 2, "ffn_hidden": 256, "activation": "gelu",
              "dtype": "float32"},
    "training": {
        "global_batch": MLP_BATCH, "micro_batch": 4,
        "optimizer": {"kind": "sgd", "lr": 0.5, "momentum": 0.9,
                      "weight_decay": 0.01},
        "schedule": {"kind": "linear", "warmup_steps": 2, "total_steps": STEPS,
                     "min_lr": 0.05},
        "grad_clip": 0.166, "seed": 11}}


# Llama: 4 query heads sharing 2 kv heads, so tp=2 splits the kv heads and
# tp=4 replicates them; vocab 255 pads under tp; rotary theta small enough
# that every position's angles differ visibly.
LLAMA_BATCH = 8
LLAMA_CLIP = 1.2
LLAMA_SPEC = {
    "model": {"family": "llama", "vocab": 255, "seq_len": 32, "hidden": 32,
              "heads": 4, "kv_heads": 2, "layers": 4, "ffn_hidden": 64,
              "rope_theta": 500.0, "norm_eps": 1.0e-5, "tie_embeddings": False,
              "dtype": "float32"},
    "training": {
        "global_batch": LLAMA_BATCH, "micro_batch": 2,
        "optimizer": {"kind": "adamw", "lr": 3.0e-3, "betas": [0.9, 0.95],
                      "eps": 1.0e-8, "weight_decay": 0.1},
        "schedule": {"kind": "cosine", "warmup_steps": 3, "total_steps": STEPS,
                     "min_lr": 3.0e-4},
        "grad_clip": LLAMA_CLIP, "seed": 7}}


def plan(batch, dp=1, tp=1, pp=1, vpp=1, mb=2, schedule="1f1b", zero=0, sp=False,
         recompute="none"):
    """Every pin the planner accepts, so that nothing is left to choose."""
    return {"dp": dp, "tp": tp, "pp": pp, "vpp": vpp, "micro_batch": mb,
            "num_microbatches": batch // (dp * mb), "schedule": schedule,
            "zero": zero, "recompute": recompute, "sp": "true" if sp else "false"}


def ranks_of(pins):
    return pins["dp"] * pins["tp"] * pins["pp"]


def plan_mismatch(line, pins):
    """What in the `plan: ...` line differs from the pins ('' if nothing)."""
    tokens = line.split()[1:]
    kv = dict(t.split("=", 1) for t in tokens if "=" in t)
    flags = {t for t in tokens if "=" not in t}
    wrong = [f"{k}={kv.get(k)} (pinned {pins[k]})"
             for k in ("dp", "tp", "pp", "zero", "recompute")
             if kv.get(k) != str(pins[k])]
    mbs = f"{pins['micro_batch']}x{pins['num_microbatches']}"
    if kv.get("micro_batch") != mbs:
        wrong.append(f"micro_batch={kv.get('micro_batch')} (pinned {mbs})")
    if kv.get("vpp", "1") != str(pins["vpp"]):
        wrong.append(f"vpp={kv.get('vpp', '1')} (pinned {pins['vpp']})")
    schedules = flags & {"gpipe", "1f1b", "interleaved"}
    if schedules != {pins["schedule"]}:
        wrong.append(f"schedule {sorted(schedules)} (pinned {pins['schedule']})")
    if ("sp" in flags) != (pins["sp"] == "true"):
        wrong.append(f"sp {'on' if 'sp' in flags else 'off'} (pinned {pins['sp']})")
    return "; ".join(wrong)


# -- running ----------------------------------------------------------------

def compile_plan(name, spec, pins):
    """Compiles SPEC for `pins`; checks and returns (binary, plan text)."""
    out = S.path(name)
    argv = [S.strata, "compile", spec, "--cluster", f"local:{ranks_of(pins)}",
            "-o", out]
    for k, v in pins.items():
        argv += ["--pin", f"{k}={v}"]
    proc = S.run(argv)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("plan: ")), "")
    print(f"   {line or '(no plan line)'}")
    wrong = plan_mismatch(line, pins) if line else "no `plan:` line printed"
    S.check(not wrong, f"{name}: the plan is the pinned one", wrong)
    return out, line[len("plan: "):]


def mpirun(ranks, binary, args, expect_ok=True, mpi_args=(), env=None,
           timeout=None):
    argv = ["mpirun", "--oversubscribe", "-np", ranks, *mpi_args, binary,
            *args]
    kw = {"timeout": timeout} if timeout else {}
    return S.run(argv, expect_ok=expect_ok, env={**MPI_ENV, **(env or {})}, **kw)


def compare(label, first, second, rtol=RTOL, fields="loss,grad_norm"):
    """compare_losses.py as one check; shows its table when it fails."""
    cmp = S.reference_tool("compare_losses.py", first, second, "--rtol", str(rtol),
                           "--fields", fields, expect_ok=False)
    return S.check(cmp.returncode == 0, label, cmp.stdout + cmp.stderr)


class Baseline:
    """One spec, its init weights and tokens, the one-rank Strata run and the
    PyTorch reference run, shared by every plan of a group."""

    def __init__(self, name, spec_dict, seed, token_args):
        self.name = name
        self.spec = S.write_text(f"{name}.yaml",
                                 yaml.safe_dump(spec_dict, sort_keys=False))
        self.batch = spec_dict["training"]["global_batch"]
        self.init = S.path(f"{name}.init.safetensors")
        self.tokens = S.path(f"{name}.tokens.bin")
        S.reference_tool("make_inputs.py", "--model-yaml", self.spec,
                         "--init-out", self.init, "--seed", str(seed),
                         "--tokens-out", self.tokens, *token_args)
        self.data = ["--init", self.init, "--data", self.tokens]
        one = S.path(f"{name}.one")
        S.run([S.strata, "compile", self.spec, "--cluster", "local:1", "-o", one])
        self.one_log = S.path(f"{name}.one.jsonl")
        self.one_ckpt = S.path(f"{name}.one.ckpt")
        S.run([one, *self.data, "--steps", STEPS, "--log", self.one_log,
               "--save", self.one_ckpt])
        self.ref_log = S.path(f"{name}.ref.jsonl")
        S.reference_tool("train.py", "--model-yaml", self.spec, *self.data,
                         "--steps", str(STEPS), "--log", self.ref_log)
        compare(f"{name}: the one-rank run matches torch (rtol {RTOL:g})",
                self.one_log, self.ref_log)

    def norms(self):
        return [r["grad_norm"] for r in read_log(self.one_log)]


def equivalence(base, label, pins, save=None):
    """Trains `pins` on its ranks; holds it to the one-rank run and torch.
    With `save`, the run also writes its final checkpoint there."""
    name = f"{base.name}-{label}"
    binary, _ = compile_plan(name, base.spec, pins)
    log = S.path(f"{name}.jsonl")
    extra = ["--save", save] if save else []
    mpirun(ranks_of(pins), binary,
           [*base.data, "--steps", STEPS, "--log", log, *extra])
    steps = [r["step"] for r in read_log(log)]
    S.check(steps == list(range(1, STEPS + 1)), f"{name}: rank 0 logged steps 1..{STEPS}",
            f"got {steps}")
    compare(f"{name}: loss and grad_norm match the one-rank run (rtol {RTOL:g})",
            log, base.one_log)
    compare(f"{name}: loss and grad_norm match torch (rtol {RTOL:g})",
            log, base.ref_log)
    got = [r["lr"] for r in read_log(log, raw=True)]
    want = [r["lr"] for r in read_log(base.one_log, raw=True)]
    S.check(got == want, f"{name}: lr equals the one-rank run's digit for digit",
            f"{got} vs {want}")
    return binary


# -- groups -----------------------------------------------------------------

def gpt_baseline():
    base = Baseline("gpt", GPT_SPEC, 3, ["--num-tokens", "20000", "--pattern",
                                         "learnable"])
    norms = base.norms()
    # Both sides of the clip are exercised, or a match proves less.
    S.check(any(n > GPT_CLIP for n in norms) and any(n < GPT_CLIP for n in norms),
            f"gpt: clipping is active in some steps, not all (grad_clip {GPT_CLIP})",
            f"grad_norms {norms}")
    return base


def data_group():
    base = {}
    S.case("gpt 4 layers: inputs, one-rank run, torch reference",
           lambda: base.update(b=gpt_baseline()))
    if not base:
        return
    b = base["b"]
    for label, pins in [
            ("dp2", plan(GPT_BATCH, dp=2)),
            ("dp2-zero1", plan(GPT_BATCH, dp=2, zero=1)),
            ("dp2-zero2", plan(GPT_BATCH, dp=2, zero=2)),
            ("dp2-zero3", plan(GPT_BATCH, dp=2, zero=3)),
            ("dp2xtp2-sp-zero1", plan(GPT_BATCH, dp=2, tp=2, sp=True, zero=1)),
            ("dp2xpp2-1f1b-zero1", plan(GPT_BATCH, dp=2, pp=2, zero=1))]:
        S.case(f"gpt {label}", equivalence, b, label, pins)


def model_group():
    base = {}
    S.case("gpt 4 layers: inputs, one-rank run, torch reference",
           lambda: base.update(b=gpt_baseline()))
    if not base:
        return
    b = base["b"]
    for label, pins in [
            ("tp2", plan(GPT_BATCH, tp=2)),
            ("tp2-sp", plan(GPT_BATCH, tp=2, sp=True)),
            ("pp2-1f1b", plan(GPT_BATCH, pp=2, schedule="1f1b")),
            ("pp2-gpipe", plan(GPT_BATCH, pp=2, schedule="gpipe")),
            ("pp2-interleaved-vpp2", plan(GPT_BATCH, pp=2, vpp=2,
                                          schedule="interleaved")),
            ("tp2xpp2-sp-1f1b", plan(GPT_BATCH, tp=2, pp=2, sp=True))]:
        S.case(f"gpt {label}", equivalence, b, label, pins)


def without_flag(argv, flag):
    """argv without `flag` and its value."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        else:
            out.append(a)
    return out


def resume(base, label, pins, data):
    """10 steps straight vs 5 + --resume 5: the same digits, the same bytes."""
    name = f"{base.name}-{label}-resume"
    binary, _ = compile_plan(name, base.spec, pins)
    n = ranks_of(pins)
    full_log, full = S.path(f"{name}.full.jsonl"), S.path(f"{name}.full.ckpt")
    mpirun(n, binary, [*data, "--steps", STEPS, "--log", full_log, "--save", full])
    half = STEPS // 2
    logs, ckpts = [], []
    for k, (begin, end) in enumerate([(0, half), (half, STEPS)]):
        log, ckpt = S.path(f"{name}.leg{k}.jsonl"), S.path(f"{name}.leg{k}.ckpt")
        extra = ["--resume", ckpts[-1]] if ckpts else []
        # --resume restores the weights: --init with it is an error.
        leg_data = without_flag(data, "--init") if ckpts else data
        mpirun(n, binary, [*leg_data, *extra, "--steps", end, "--log", log,
                           "--save", ckpt])
        logs.append(log)
        ckpts.append(ckpt)
    fields = ("loss", "grad_norm", "lr")
    want = [[r[f] for f in fields] for r in read_log(full_log, raw=True)]
    got = [[r[f] for f in fields] for path in logs for r in read_log(path, raw=True)]
    S.check(len(want) == STEPS and got == want,
            f"{name}: {half} + {STEPS - half} steps across a --resume log the "
            "uninterrupted run's loss, grad_norm and lr digit for digit",
            "\n".join(f"step {i}: {g} vs {w}" for i, (g, w) in
                      enumerate(zip(got, want)) if g != w) or
            f"{len(got)} vs {len(want)} steps")
    full, last = latest(full), latest(ckpts[-1])
    files = sorted(f for f in os.listdir(full) if f.startswith("rank-"))
    differ = [f for f in files if not os.path.exists(os.path.join(last, f))
              or open(os.path.join(full, f), "rb").read()
              != open(os.path.join(last, f), "rb").read()]
    S.check(len(files) == n and not differ,
            f"{name}: the {n} final rank files are byte-identical to the "
            "uninterrupted run's", f"rank files {files}; differing {differ}")
    with open(os.path.join(full, "index.json")) as fa, \
            open(os.path.join(last, "index.json")) as fb:
        a, b = json.load(fa), json.load(fb)
    S.check(a == b, f"{name}: final index.json equal", f"{a}\n{b}")
    return full


def paste(global_arr, start, box):
    """Copies `box` into global_arr at `start`, clipped to the global shape
    (a box may reach into padding); returns the number of elements copied."""
    clip = tuple(slice(0, min(b, g - s))
                 for b, g, s in zip(box.shape, global_arr.shape, start))
    dst = tuple(slice(s, s + c.stop) for s, c in zip(start, clip))
    global_arr[dst] = box[clip]
    return int(np.prod([c.stop for c in clip]))


def distance(got, want):
    """Relative L2 distance over all tensors of `want` (as torch_equivalence
    measures final weights), and the tensors furthest apart. Per tensor the
    distance says little: the key bias of attention has a zero gradient in
    exact arithmetic, so Adam turns its rounding noise into updates that
    differ between any two summation orders."""
    num = den = 0.0
    per = []
    for k in want:
        a = got[k].astype(np.float64).reshape(-1)
        b = want[k].astype(np.float64).reshape(-1)
        d2, n2 = float(np.sum((a - b) ** 2)), float(np.sum(b ** 2))
        num, den = num + d2, den + n2
        per.append((np.sqrt(d2 / n2) if n2 else np.sqrt(d2), k))
    per.sort(reverse=True)
    return np.sqrt(num / den), "furthest tensors (rel L2): " + ", ".join(
        f"{k} {d:.2e}" for d, k in per[:4])


def checkpoint_layout(base, ckpt, plan_text, ranks):
    """The per-rank checkpoint holds what docs/runtime.md says, and the
    weights and AdamW moments put back together from its pieces equal the
    one-rank run's final ones."""
    entries = sorted(os.listdir(ckpt))
    want = ["config.json", "index.json"] + [f"rank-{r:05d}.safetensors"
                                            for r in range(ranks)]
    S.check(entries == want, f"checkpoint: holds {', '.join(want)}",
            f"holds {entries}")
    with open(os.path.join(ckpt, "index.json")) as f:
        index = json.load(f)
    head = {k: index.get(k) for k in ("layout", "world_size", "plan", "step",
                                      "data_position")}
    S.check(head == {"layout": "per-rank", "world_size": ranks, "plan": plan_text,
                     "step": STEPS, "data_position": STEPS * base.batch},
            "checkpoint: index.json names the per-rank layout, world size, plan, "
            "step and data position", json.dumps(head))
    files = {f: safetensors_io.load(os.path.join(ckpt, f))[0]
             for f in entries if f.startswith("rank-")}
    one_model, _ = safetensors_io.load(os.path.join(latest(base.one_ckpt),
                                                    "model.safetensors"))
    one_state, _ = safetensors_io.load(os.path.join(latest(base.one_ckpt),
                                                    "optimizer.safetensors"))
    tensors = index.get("tensors", {})
    S.check(sorted(tensors) == sorted(one_model),
            "checkpoint: index.json lists every model parameter",
            f"only in index {sorted(set(tensors) - set(one_model))}, missing "
            f"{sorted(set(one_model) - set(tensors))}")

    problems, sharded, weights = [], 0, {}
    for name, t in sorted(tensors.items()):
        whole = np.full(t["global_shape"], np.nan, dtype=np.float32)
        covered = 0
        sharded += len(t["pieces"]) > 1
        for p in t["pieces"]:
            box = files.get(p["file"], {}).get(name)
            if box is None or list(box.shape) != p["shape"]:
                problems.append(f"{name}: {p['file']} lacks it with shape {p['shape']}")
                continue
            covered += paste(whole, p["start"], box)
        if covered != whole.size or np.isnan(whole).any():
            problems.append(f"{name}: pieces cover {covered} of {whole.size} elements")
            continue
        weights[name] = whole.reshape(t["checkpoint_shape"])
    S.check(not problems, "checkpoint: every piece is in its rank file and the "
            "pieces tile each parameter exactly", "\n".join(problems[:10]))
    S.check(sharded > 0, "checkpoint: some parameters are split across ranks "
            f"({sharded} of {len(tensors)})")
    if weights.keys() == one_model.keys():
        d, detail = distance(weights, one_model)
        S.check(d <= WEIGHTS_RTOL, "checkpoint: weights reassembled from the "
                f"pieces equal the one-rank run's (relative L2 {d:.2e} <= "
                f"{WEIGHTS_RTOL:g})", detail)

    states = index.get("optimizer_state", {})
    S.check(sorted(states) == sorted(one_state),
            "checkpoint: index.json lists every optimizer moment",
            f"only in index {sorted(set(states) - set(one_state))}, missing "
            f"{sorted(set(one_state) - set(states))}")
    problems, moments = [], {}
    for name, s in sorted(states.items()):
        param = name.rsplit(".", 1)[0]
        whole = np.full(tensors[param]["global_shape"], np.nan, dtype=np.float32)
        # A box's state is the concatenation of its owners' flat ranges.
        boxes = {}
        for p in s["pieces"]:
            chunk = files.get(p["file"], {}).get(name)
            if chunk is None or chunk.size != p["count"]:
                problems.append(f"{name}: {p['file']} lacks its range of "
                                f"{p['count']} values")
                continue
            key = (tuple(p["box_start"]), tuple(p["box_shape"]))
            boxes.setdefault(key, []).append((p["offset"], chunk.reshape(-1)))
        for (start, shape), ranges in boxes.items():
            flat = np.concatenate([c for _, c in sorted(ranges, key=lambda r: r[0])])
            offsets = sorted(o for o, _ in ranges)
            if flat.size != int(np.prod(shape)) or offsets[0] != 0:
                problems.append(f"{name}: box at {list(start)} has {flat.size} of "
                                f"{int(np.prod(shape))} values")
                continue
            paste(whole, start, flat.reshape(shape))
        if np.isnan(whole).any():
            problems.append(f"{name}: the boxes leave elements uncovered")
            continue
        moments[name] = whole.reshape(one_state[name].shape)
    S.check(not problems, "checkpoint: the optimizer ranges fill every moment's "
            "boxes", "\n".join(problems[:10]))
    if moments.keys() == one_state.keys():
        for kind in ("exp_avg", "exp_avg_sq"):
            want = {k: v for k, v in one_state.items() if k.endswith("." + kind)}
            d, detail = distance(moments, want)
            S.check(d <= STATE_RTOL, f"checkpoint: AdamW {kind} reassembled from "
                    f"the ranges equals the one-rank run's (relative L2 {d:.2e} "
                    f"<= {STATE_RTOL:g})", detail)


def rank_mismatch(binary, plan_text):
    """A 2-rank program started on 1 or 3 ranks says so and stops at once."""
    for n in (1, 3):
        t0 = time.monotonic()
        proc = mpirun(n, binary, ["--steps", 3], expect_ok=False,
                      timeout=FAILURE_DEADLINE_S)
        took = time.monotonic() - t0
        shown = f"exit {proc.returncode}; stderr:\n{proc.stderr.strip()}"
        S.check(proc.returncode != 0 and took < FAILURE_DEADLINE_S,
                f"-np {n}: exits non-zero within {FAILURE_DEADLINE_S} s "
                f"(exit {proc.returncode}, {took:.1f} s)", shown)
        want = (f"this program was compiled for 2 ranks (plan: {plan_text}); "
                "launch it with mpirun -np 2")
        S.check(want in proc.stderr, f"-np {n}: stderr says '{want}'", shown)
        crash = [m for m in CRASH_MARKERS if m in proc.stderr]
        S.check(not crash, f"-np {n}: no crash text", shown)
    proc = S.run([binary, "--steps", 3], expect_ok=False, timeout=FAILURE_DEADLINE_S)
    S.check(proc.returncode == 1 and "launch it with mpirun -np 2" in proc.stderr,
            "without mpirun: exits 1 and says to launch with mpirun -np 2",
            f"exit {proc.returncode}; stderr:\n{proc.stderr}")


def dead_rank(label, binary):
    """Rank 1 exits at the start of step 3; the job must end promptly, with
    a failure status and the dead rank named."""
    t0 = time.monotonic()
    try:
        proc = mpirun(2, binary, ["--steps", STEPS], expect_ok=False,
                      mpi_args=["-x", "STRATA_TEST_FAIL"],
                      env={"STRATA_TEST_FAIL": "1:3"}, timeout=FAILURE_DEADLINE_S)
    except CommandFailed as e:
        S.fail(f"{label}: the job ends within {FAILURE_DEADLINE_S} s", str(e))
        return
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    shown = f"exit {proc.returncode}; output:\n{out.strip()}"
    S.check(proc.returncode != 0, f"{label}: the job exits non-zero "
            f"(exit {proc.returncode}, {took:.1f} s)", shown)
    S.check("strata: rank 1: STRATA_TEST_FAIL" in out
            and re.search(r"Process name: \[\[\d+,\d+\],1\]", out),
            f"{label}: the output names rank 1 (its own message and mpirun's "
            "failed process)", shown)


def runtime_group():
    mlp = {}
    S.case("mlp vocab 255: inputs, one-rank run, torch reference",
           lambda: mlp.update(b=Baseline(
               "mlp", MLP_SPEC, 4, ["--num-tokens", "6000", "--pattern", "learnable",
                                    "--token-seed", "2"])))
    if mlp:
        m = mlp["b"]
        norms = m.norms()
        clip = MLP_SPEC["training"]["grad_clip"]
        S.check(any(n > clip for n in norms) and any(n < clip for n in norms),
                f"mlp: clipping is active in some steps, not all (grad_clip {clip})",
                f"grad_norms {norms}")
        for label, pins in [
                ("dp2-zero1", plan(MLP_BATCH, dp=2, mb=4, zero=1)),
                ("tp2-padded-vocab", plan(MLP_BATCH, tp=2, mb=4)),
                ("dp2xtp2-padded-vocab", plan(MLP_BATCH, dp=2, tp=2, mb=4))]:
            S.case(f"mlp {label}", equivalence, m, label, pins)

    gpt = {}
    S.case("gpt 4 layers: inputs, one-rank run, torch reference",
           lambda: gpt.update(b=gpt_baseline()))
    if gpt:
        g = gpt["b"]
        dxt = plan(GPT_BATCH, dp=2, tp=2, sp=True, zero=1)
        ckpt = {}
        S.case("gpt dp2xtp2 --save/--resume across ranks, 5 + 5 steps",
               lambda: ckpt.update(dir=resume(g, "dp2xtp2", dxt, g.data)))
        if ckpt:
            with open(os.path.join(ckpt["dir"], "index.json")) as f:
                plan_text = json.load(f).get("plan")
            S.case("gpt dp2xtp2 per-rank checkpoint layout and contents",
                   checkpoint_layout, g, ckpt["dir"], plan_text, 4)
        # Seed-initialised (no --init): the resume path on its own.
        S.case("gpt pp2 --save/--resume across ranks, 5 + 5 steps", resume,
               g, "pp2", plan(GPT_BATCH, pp=2), ["--data", g.tokens])

    bins = {}

    def build_two_rank():
        spec = S.write_text("gpt-failure.yaml", yaml.safe_dump(GPT_SPEC))
        bins["dp2"] = compile_plan("gpt-dp2-failure", spec, plan(GPT_BATCH, dp=2))
        bins["pp2"] = compile_plan("gpt-pp2-failure", spec, plan(GPT_BATCH, pp=2))
    S.case("2-rank programs for the failure checks", build_two_rank)
    if bins:
        S.case("rank-count mismatch (dp=2 program on 1 and 3 ranks)",
               rank_mismatch, *bins["dp2"])
        S.case("dead rank (dp=2, rank 1 exits at step 3)", dead_rank,
               "dp2 dead rank", bins["dp2"][0])
        S.case("dead rank (pp=2, rank 1 exits at step 3)", dead_rank,
               "pp2 dead rank", bins["pp2"][0])


def hf_buffers(base):
    """A Hugging Face Llama checkpoint may carry each layer's rotary
    inv_freq buffer: --init skips it (the first step's loss is the plain
    file's, digit for digit), but any other unknown tensor is an error."""
    tensors, _ = safetensors_io.load(base.init)
    head_dim = LLAMA_SPEC["model"]["hidden"] // LLAMA_SPEC["model"]["heads"]
    theta = LLAMA_SPEC["model"]["rope_theta"]
    inv_freq = (1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)).astype(np.float32)
    with_buffers = dict(tensors)
    for i in range(LLAMA_SPEC["model"]["layers"]):
        with_buffers[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = inv_freq
    hf = S.path("llama.hf-buffers.safetensors")
    safetensors_io.save(hf, with_buffers, metadata={"format": "pt"})
    one = S.path("llama.one-hf")
    S.run([S.strata, "compile", base.spec, "--cluster", "local:1", "-o", one])

    def first_loss(init, name):
        log = S.path(f"llama.{name}.jsonl")
        S.run([one, "--init", init, "--data", base.tokens, "--steps", 1, "--log", log])
        return read_log(log, raw=True)[0]["loss"]
    got = first_loss(hf, "hf-buffers")
    want = read_log(base.one_log, raw=True)[0]["loss"]
    S.check(got == want, "llama: --init with HF rotary_emb.inv_freq buffers "
            "trains like the plain file (step 1 loss digit for digit)",
            f"{got} vs {want}")
    # Hugging Face ships Llama weights in bfloat16 (buffers included): such a
    # file loads exactly, as the same values in float32 do.
    bf16 = S.path("llama.hf-bf16.safetensors")
    safetensors_io.save(bf16, with_buffers, metadata={"format": "pt"}, dtype="BF16")
    widened, _ = safetensors_io.load(bf16)
    f32 = S.path("llama.hf-bf16-as-f32.safetensors")
    safetensors_io.save(f32, widened, metadata={"format": "pt"})
    got, want = first_loss(bf16, "hf-bf16"), first_loss(f32, "hf-bf16-as-f32")
    S.check(got == want, "llama: a BF16 Hugging Face-style file loads exactly "
            "(step 1 loss equals the float32 file of its values)", f"{got} vs {want}")
    extra = dict(tensors)
    extra["model.layers.0.self_attn.q_proj.bias"] = np.zeros(32, np.float32)
    bad = S.path("llama.extra.safetensors")
    safetensors_io.save(bad, extra, metadata={"format": "pt"})
    proc = S.run([one, "--init", bad, "--data", base.tokens, "--steps", 1],
                 expect_ok=False)
    S.check(proc.returncode != 0 and "Not in the model: "
            "'model.layers.0.self_attn.q_proj.bias'" in proc.stderr,
            "llama: --init still rejects a tensor that is not a parameter "
            "or an HF buffer", proc.stderr)


def llama_group():
    base = {}

    def baseline():
        b = Baseline("llama", LLAMA_SPEC, 9, ["--num-tokens", "12000", "--pattern",
                                              "learnable", "--token-seed", "3"])
        norms = b.norms()
        S.check(any(n > LLAMA_CLIP for n in norms) and any(n < LLAMA_CLIP for n in norms),
                f"llama: clipping is active in some steps, not all (grad_clip {LLAMA_CLIP})",
                f"grad_norms {norms}")
        base.update(b=b)
    S.case("llama 4 layers: HF-named inputs, one-rank run, torch reference", baseline)
    if not base:
        return
    b = base["b"]
    S.case("llama --init with Hugging Face buffers", hf_buffers, b)
    for label, pins in [
            ("dp2-zero2", plan(LLAMA_BATCH, dp=2, zero=2)),
            ("dp2-zero3", plan(LLAMA_BATCH, dp=2, zero=3)),
            ("tp2-kv-split", plan(LLAMA_BATCH, tp=2)),
            ("pp2-1f1b-recompute-full", plan(LLAMA_BATCH, pp=2, recompute="full")),
            ("pp2-interleaved-vpp2", plan(LLAMA_BATCH, pp=2, vpp=2,
                                          schedule="interleaved")),
            ("dp2xtp2-sp-zero1-selective", plan(LLAMA_BATCH, dp=2, tp=2, sp=True,
                                                zero=1, recompute="selective")),
            ("tp2xpp2-sp", plan(LLAMA_BATCH, tp=2, pp=2, sp=True))]:
        S.case(f"llama {label}", equivalence, b, label, pins)
    ckpt = S.path("llama-tp4.ckpt")
    pins = plan(LLAMA_BATCH, tp=4, sp=True)
    done = {}
    S.case("llama tp4-sp-kv-replicated (saves its checkpoint)",
           lambda: done.update(ok=equivalence(b, "tp4-sp-kv-replicated", pins,
                                              save=ckpt)))
    if done:
        with open(os.path.join(latest(ckpt), "index.json")) as f:
            plan_text = json.load(f).get("plan")
        S.case("llama tp4 per-rank checkpoint: HF names, global shapes, the "
               "one-rank weights", checkpoint_layout, b, latest(ckpt), plan_text, 4)


def main():
    for g in SELECTED:
        {"data": data_group, "model": model_group, "runtime": runtime_group,
         "llama": llama_group}[g]()
    S.finish()


if __name__ == "__main__":
    main()
