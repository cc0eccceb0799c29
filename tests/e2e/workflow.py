#!/usr/bin/python3
"""The training workflow around the core (docs/runtime.md): evaluation,
preemption, step-numbered checkpoints, resharding, consolidation, Hugging
Face spellings, run-time overrides, log contents, generation.

Groups (one ctest each, so that ctest -j runs them side by side):
  eval        --eval-data: the loss of the same windows every time, logged;
              no effect on training; the same on 1 rank and under tp2 and
              pp2 plans; equal to the PyTorch reference's; --save-best.
  checkpoints SIGTERM (1 rank, and 2 ranks under mpirun) checkpoints and
              exits 0, the run resumes exactly; --save-every + --keep-last
              + latest; --resume and --init across plans and rank counts
              (resharding, optimizer state included); consolidate; HF
              spellings and a PyTorch pickle for --init; config.json.
  run         --info and the run-time overrides (lr, schedule, steps,
              seed) against the reference; log records (timestamps, MFU,
              memory, summary); generation: greedy tokens equal the
              reference's, sampling reproducible by seed, text prompts
              through GPT-2 tokenizer files equal an independent encoder.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "reference"))
import safetensors_io  # noqa: E402
from e2e_common import MPI_OVERSUBSCRIBE_ENV, PYTHON, Session, descendants, latest, read_log, rel_diff  # noqa: E402

group = argparse.ArgumentParser(add_help=False)
group.add_argument("--group", choices=["eval", "checkpoints", "run"], required=True)
GROUP, rest = group.parse_known_args()
sys.argv = [sys.argv[0], *rest]
S = Session(__doc__)

MPI_ENV = MPI_OVERSUBSCRIBE_ENV
SPEC = {"model": {"family": "gpt", "vocab": 256, "seq_len": 16, "hidden": 32,
                  "heads": 4, "layers": 2},
        "training": {"global_batch": 8, "micro_batch": 4,
                     "optimizer": {"kind": "adamw", "lr": 3.0e-3, "weight_decay": 0.01},
                     "grad_clip": 1.0, "seed": 7}}


def setup():
    spec = S.write_text("gpt.yaml", yaml.safe_dump(SPEC, sort_keys=False))
    tokens, val = S.path("train.bin"), S.path("val.bin")
    S.reference_tool("make_inputs.py", "--model-yaml", spec, "--tokens-out", tokens,
                     "--num-tokens", "20000", "--pattern", "learnable")
    S.reference_tool("make_inputs.py", "--model-yaml", spec, "--tokens-out", val,
                     "--num-tokens", "4000", "--pattern", "learnable")
    return spec, tokens, val


def compile_(spec, name, ranks=1, pins=()):
    out = S.path(name)
    S.run([S.strata, "compile", spec, "--cluster", f"local:{ranks}",
           *[a for p in pins for a in ("--pin", p)], "-o", out])
    return out


def mpirun(ranks, binary, args, expect_ok=True):
    return S.run(["mpirun", "--oversubscribe", "-np", ranks, binary, *args],
                 expect_ok=expect_ok, env=MPI_ENV)


def raw_fields(path, fields=("loss", "grad_norm", "lr")):
    return [[r[f] for f in fields] for r in read_log(path, raw=True)]


def reference_eval(spec, weights, val, batches, extra=()):
    out = S.reference_tool("infer.py", "eval", "--model-yaml", spec, "--weights", weights,
                           "--data", val, "--batches", str(batches), *extra)
    return json.loads(out.stdout)["loss"]


# -- eval ------------------------------------------------------------------------


def eval_group():
    spec, tokens, val = setup()
    one = compile_(spec, "one")
    a, b = S.path("plain.jsonl"), S.path("eval.jsonl")
    S.run([one, "--data", tokens, "--steps", 12, "--log", a])
    S.run([one, "--data", tokens, "--steps", 12, "--log", b, "--eval-data", val,
           "--eval-every", 4, "--eval-batches", 3, "--save", "ev", "--save-best"])
    S.check(raw_fields(a) == raw_fields(b), "eval: training with --eval-every logs the "
            "same digits as without (evaluation updates nothing)")
    evals = read_log(b, kind="eval")
    S.check([e["step"] for e in evals] == [4, 8, 12] and all(e["eval_batches"] == 3
            and e["eval_tokens"] == 3 * 8 * 16 for e in evals),
            "eval: records at steps 4, 8, 12, each over 3 batches of 8 x 16 tokens",
            json.dumps(evals))
    losses = [e["eval_loss"] for e in evals]
    S.check(losses[-1] < losses[0], "eval: the validation loss falls", f"{losses}")
    best = min(range(3), key=lambda i: losses[i])
    with open(os.path.join(S.path("ev"), "best", "trainer.json")) as f:
        S.check(json.load(f)["step"] == evals[best]["step"],
                "eval: --save-best keeps the checkpoint of the lowest eval loss",
                f"losses {losses}")
    # Evaluating a checkpoint's weights: the reference's loss on the same
    # windows, and every plan's.
    S.run([S.strata, "checkpoint", "consolidate", "ev", "-o", S.path("w.safetensors")])
    want = reference_eval(spec, S.path("w.safetensors"), val, 3)
    got = losses[-1]
    S.check(rel_diff(got, want) < 1e-5, f"eval: the step-12 eval loss {got:.6f} equals "
            f"the PyTorch reference's on the same windows ({want:.6f})")
    for label, pins in (("tp2", ["tp=2"]), ("pp2", ["pp=2"])):
        binary = compile_(spec, label, 2, pins)
        log = S.path(f"{label}.jsonl")
        # One step more from the checkpoint under each plan; the evaluation
        # at the end sees the step-13 weights, as the 1-rank program's does.
        mpirun(2, binary, ["--data", tokens, "--resume", "ev", "--steps", 13,
                           "--eval-data", val, "--eval-batches", 3, "--log", log])
        S.run([one, "--data", tokens, "--resume", "ev", "--steps", 13,
               "--eval-data", val, "--eval-batches", 3, "--log", S.path("one7.jsonl")])
        e2, e1 = read_log(log, kind="eval"), read_log(S.path("one7.jsonl"), kind="eval")
        S.check(len(e1) == len(e2) == 1 and rel_diff(e1[0]["eval_loss"],
                                                     e2[0]["eval_loss"]) < 1e-5,
                f"eval: {label} (2 ranks, resumed from the 1-rank checkpoint) evaluates "
                "as the 1-rank program does", f"{e2} vs {e1}")
    proc = S.run([one, "--steps", 2, "--eval-every", 1], expect_ok=False)
    S.check(proc.returncode == 1 and "--eval-every needs --eval-data" in proc.stderr,
            "eval: --eval-every without --eval-data is an error", proc.stderr)


# -- checkpoints -------------------------------------------------------------------


def preempt(label, argv, log, ranks_of=None, after=3):
    """Starts argv, waits until `log` has `after` steps, sends SIGTERM (to the
    ranks when ranks_of names the binary), returns (exit code, stderr)."""
    env = {**os.environ, **MPI_ENV}
    proc = subprocess.Popen([str(a) for a in argv], cwd=S.dir, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(log) and len(read_log(log)) >= after:
            break
        time.sleep(0.05)
    targets = descendants(proc.pid, ranks_of) if ranks_of else [proc.pid]
    for pid in targets:
        os.kill(pid, signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        S.fail(f"{label}: the job ends after SIGTERM", err)
    return proc.returncode, err, len(targets)


def checkpoints_group():
    spec, tokens, val = setup()
    one = compile_(spec, "one")
    full = S.path("full.jsonl")
    S.run([one, "--data", tokens, "--steps", 400, "--log", full, "--save", "full"])

    # SIGTERM, one rank: finish the step, checkpoint, exit 0; resume exactly.
    log = S.path("pre1.jsonl")
    rc, err, _ = preempt("1 rank", [one, "--data", tokens, "--steps", 400, "--log", log,
                                    "--save", "pre1", "--save-every", 1000], log)
    steps = [r["step"] for r in read_log(log)]
    k = steps[-1] if steps else 0
    S.check(rc == 0 and f"SIGTERM received: stopped after step {k} of 400" in err,
            f"SIGTERM (1 rank): exits 0 after step {k} and says so", err[-800:])
    S.check(os.path.realpath(latest(S.path("pre1"))).endswith(f"step-{k:08d}")
            and 0 < k < 400, f"SIGTERM (1 rank): checkpoint pre1/step-{k:08d} is latest")
    summary = read_log(log, kind="summary")
    S.check(summary and summary[-1]["stopped_by"] == "SIGTERM"
            and summary[-1]["last_step"] == k, "SIGTERM (1 rank): the log's summary "
            "says the run was stopped by SIGTERM", json.dumps(summary))
    S.run([one, "--data", tokens, "--steps", 400, "--resume", "pre1", "--log", log,
           "--save", "pre1"])
    S.check(raw_fields(log) == raw_fields(full), "SIGTERM (1 rank): resumed with the "
            "same --log, steps 1..400 are logged once each, digit for digit as the "
            "uninterrupted run")

    # SIGTERM to the ranks of a 2-rank job (as a scheduler delivers it).
    dp2 = compile_(spec, "dp2", 2, ["dp=2"])
    log2 = S.path("pre2.jsonl")
    rc, err, n = preempt("2 ranks", ["mpirun", "--oversubscribe", "-np", 2, dp2, "--data",
                                     tokens, "--steps", 400, "--log", log2, "--save",
                                     "pre2"], log2, ranks_of="dp2")
    k2 = read_log(log2)[-1]["step"]
    S.check(n == 2 and rc == 0 and "SIGTERM received" in err and
            os.path.realpath(latest(S.path("pre2"))).endswith(f"step-{k2:08d}"),
            f"SIGTERM (2 ranks): both ranks stop after step {k2}, the job checkpoints "
            "and mpirun exits 0", f"{n} ranks signalled, exit {rc}\n{err[-800:]}")

    # ... and the 2-rank checkpoint resumes on 1 rank (another plan).
    log21 = S.path("resharded.jsonl")
    S.run([one, "--data", tokens, "--resume", "pre2", "--steps", k2 + 5, "--log", log21])
    got = read_log(log21)
    want = read_log(full)[k2:k2 + 5]
    S.check([r["step"] for r in got] == list(range(k2 + 1, k2 + 6)) and all(
        rel_diff(a["loss"], b["loss"]) < 1e-4 for a, b in zip(got, want)),
        "resharding: the dp=2 checkpoint resumes on 1 rank (optimizer state too) and "
        "continues the uninterrupted losses", f"{[r['loss'] for r in got]} vs "
        f"{[r['loss'] for r in want]}")
    # ... and a 1-rank checkpoint resumes under tp=2.
    tp2 = compile_(spec, "tp2", 2, ["tp=2"])
    S.run([one, "--data", tokens, "--steps", 4, "--save", "four"])
    log12 = S.path("tp2.jsonl")
    mpirun(2, tp2, ["--data", tokens, "--resume", "four", "--steps", 8, "--log", log12,
                    "--save", "tp2ck"])
    got = read_log(log12)
    want = read_log(full)[4:8]
    S.check(len(got) == 4 and all(rel_diff(a["loss"], b["loss"]) < 1e-4
                                  for a, b in zip(got, want)),
            "resharding: a 1-rank checkpoint resumes under tp=2 and continues the "
            "uninterrupted losses", f"{[r['loss'] for r in got]} vs "
            f"{[r['loss'] for r in want]}")
    # --init from a per-rank checkpoint of another plan.
    a, b = S.path("init-dir.jsonl"), S.path("init-file.jsonl")
    S.run([S.strata, "checkpoint", "consolidate", "tp2ck", "-o", S.path("tp2.safetensors")])
    S.run([one, "--data", tokens, "--steps", 2, "--init", "tp2ck", "--log", a])
    S.run([one, "--data", tokens, "--steps", 2, "--init", S.path("tp2.safetensors"),
           "--log", b])
    S.check(raw_fields(a) == raw_fields(b), "--init: a tp=2 run directory and its "
            "consolidated file give the same run")

    # Consolidation: one file, HF names and shapes, config.json.
    cons = S.path("cons", "model.safetensors")
    os.makedirs(S.path("cons"))
    S.run([S.strata, "checkpoint", "consolidate", "tp2ck", "-o", cons])
    tensors, _ = safetensors_io.load(cons)
    ref, _ = safetensors_io.load(os.path.join(latest(S.path("four")), "model.safetensors"))
    S.check(sorted(tensors) == sorted(ref) and all(tensors[n].shape == ref[n].shape
                                                   for n in ref),
            "consolidate: the tp=2 checkpoint becomes one file with every tensor in "
            "its Hugging Face name and shape", f"{sorted(tensors)[:5]}")
    with open(S.path("cons", "config.json")) as f:
        config = json.load(f)
    S.check(config.get("model_type") == "gpt2" and config.get("n_embd") == 32
            and config.get("n_layer") == 2 and config.get("vocab_size") == 256
            and config.get("n_positions") == 16, "consolidate: config.json beside it "
            "describes the GPT-2 model", json.dumps(config))
    S.check(os.path.exists(os.path.join(latest(S.path("tp2ck")), "config.json")),
            "checkpoints hold config.json")

    # --save-every, --keep-last and latest.
    S.run([one, "--data", tokens, "--steps", 7, "--save", "rot", "--save-every", 2,
           "--keep-last", 2])
    entries = sorted(os.listdir(S.path("rot")))
    S.check(entries == ["latest", "step-00000006", "step-00000007"]
            and os.readlink(S.path("rot", "latest")) == "step-00000007",
            "--save-every 2 --keep-last 2: the newest two step directories and latest",
            f"{entries}")

    # Hugging Face spellings for --init.
    w, _ = safetensors_io.load(cons)
    hf = {f"transformer.{n}": v for n, v in w.items()}
    for i in range(2):
        hf[f"transformer.h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 16, 16), np.float32))
        hf[f"transformer.h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    hf["lm_head.weight"] = w["wte.weight"]
    safetensors_io.save(S.path("hf.safetensors"), hf)
    c = S.path("hf.jsonl")
    S.run([one, "--data", tokens, "--steps", 2, "--init", S.path("hf.safetensors"),
           "--log", c])
    S.check(raw_fields(c) == raw_fields(b), "--init accepts Hugging Face's spellings "
            "(transformer. prefix, attn.bias/masked_bias buffers, tied lm_head)")
    hf["lm_head.weight"] = w["wte.weight"] + 1
    safetensors_io.save(S.path("untied.safetensors"), hf)
    proc = S.run([one, "--steps", 1, "--init", S.path("untied.safetensors")],
                 expect_ok=False)
    S.check(proc.returncode == 1 and "'lm_head.weight' differs from 'wte.weight'"
            in proc.stderr, "--init: an untied lm_head is refused with a reason",
            proc.stderr)
    S.run([PYTHON, "-c", "import torch, sys; torch.save({'w': torch.zeros(2)}, sys.argv[1])",
           S.path("pytorch_model.bin")])
    proc = S.run([one, "--steps", 1, "--init", S.path("pytorch_model.bin")],
                 expect_ok=False)
    S.check(proc.returncode == 1 and "is a PyTorch pickle" in proc.stderr
            and "model.safetensors" in proc.stderr,
            "--init: a PyTorch pickle is named as such, with what to do", proc.stderr)


# -- run settings, logs, generation ------------------------------------------------------


def run_group():
    spec, tokens, val = setup()
    one = compile_(spec, "one")
    info = S.run([one, "--info", "--lr", "0.002", "--lr-schedule", "cosine",
                  "--warmup-steps", "2", "--lr-decay-steps", "6", "--min-lr", "1e-4",
                  "--steps", "8", "--eval-data", val, "--eval-every", "4"]).stdout
    for needle in ("lr 0.002 (--lr)", "lr schedule: cosine (--lr-schedule), warmup 2 "
                   "steps (--warmup-steps), min lr 0.0001 (--min-lr), decay steps 6 "
                   "(--lr-decay-steps)", "steps: 8 (--steps)", "eval: every 4 steps"):
        S.check(needle in info, f"--info shows the run-time settings: '{needle}'", info)
    log, ref = S.path("over.jsonl"), S.path("over.ref.jsonl")
    init = S.path("init.safetensors")
    S.reference_tool("make_inputs.py", "--model-yaml", spec, "--init-out", init)
    over = ["--lr", "0.002", "--lr-schedule", "cosine", "--warmup-steps", "2",
            "--lr-decay-steps", "6", "--min-lr", "1e-4", "--seed", "11"]
    S.run([one, "--init", init, "--data", tokens, "--steps", 8, "--log", log, *over])
    S.reference_tool("train.py", "--model-yaml", spec, "--init", init, "--data", tokens,
                     "--steps", "8", "--log", ref, "--lr", "0.002", "--schedule", "cosine",
                     "--warmup-steps", "2", "--total-steps", "6", "--min-lr", "1e-4",
                     "--seed", "11")
    cmp = S.reference_tool("compare_losses.py", log, ref, "--rtol", "1e-4",
                           "--fields", "loss,grad_norm,lr", expect_ok=False)
    S.check(cmp.returncode == 0, "overrides: --lr, --lr-schedule, --warmup-steps, "
            "--lr-decay-steps, --min-lr and --seed train as the reference does with "
            "the same settings", cmp.stdout)

    recs = read_log(log)
    stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
    S.check(all(stamp.match(r["time"]) and 0 < r["mfu"] < 1 and r["memory_bytes"] > 1e6
                and r["samples_seen"] == r["step"] * 8 for r in recs),
            "log: every step has an ISO timestamp, an MFU in (0, 1) and the memory "
            "in use", json.dumps(recs[-1]))
    summary = read_log(log, kind="summary")
    S.check(len(summary) == 1 and summary[0]["steps_run"] == 8 and summary[0]["last_step"]
            == 8 and summary[0]["mean_tokens_per_s"] > 0 and summary[0]["stopped_by"]
            is None, "log: the run ends with a summary", json.dumps(summary))

    # Generation: greedy tokens equal the reference's full forward argmax.
    S.run([one, "--data", tokens, "--steps", 30, "--save", "trained"])
    weights = S.path("trained.safetensors")
    S.run([S.strata, "checkpoint", "consolidate", "trained", "-o", weights])
    out = S.run([one, "--generate", 20, "--resume", "trained", "--prompt-ids", "5,6,7",
                 "--temperature", "0"])
    got = out.stdout.split()
    want = S.reference_tool("infer.py", "greedy", "--model-yaml", spec, "--weights",
                            weights, "--prompt-ids", "5,6,7", "--count", "20").stdout.split()
    S.check(got == want, "generate: greedy tokens (key/value cache) equal the PyTorch "
            "reference's argmax of the full forward", f"{got}\n{want}")
    # Llama (rotary embeddings, grouped-query attention, untied head).
    llama = {"model": {"family": "llama", "vocab": 256, "seq_len": 16, "hidden": 32,
                       "heads": 4, "kv_heads": 2, "layers": 2, "ffn_hidden": 64},
             "training": {"global_batch": 8, "seed": 5}}
    llama_spec = S.write_text("llama.yaml", yaml.safe_dump(llama, sort_keys=False))
    llama_bin, llama_init = compile_(llama_spec, "llama"), S.path("llama.safetensors")
    S.reference_tool("make_inputs.py", "--model-yaml", llama_spec, "--init-out", llama_init)
    got = S.run([llama_bin, "--generate", 12, "--init", llama_init, "--prompt-ids",
                 "3,1,4,1,5", "--temperature", "0"]).stdout.split()
    want = S.reference_tool("infer.py", "greedy", "--model-yaml", llama_spec, "--weights",
                            llama_init, "--prompt-ids", "3,1,4,1,5",
                            "--count", "12").stdout.split()
    S.check(got == want, "generate (llama): greedy tokens equal the PyTorch reference's",
            f"{got}\n{want}")
    # Past seq_len (16) the context restarts from its last half.
    long = S.run([one, "--generate", 40, "--init", weights, "--prompt-ids", "1",
                  "--temperature", "0.8", "--top-k", "20", "--seed", "3"]).stdout.split()
    again = S.run([one, "--generate", 40, "--init", weights, "--prompt-ids", "1",
                   "--temperature", "0.8", "--top-k", "20", "--seed", "3"]).stdout.split()
    other = S.run([one, "--generate", 40, "--init", weights, "--prompt-ids", "1",
                   "--temperature", "0.8", "--top-k", "20", "--seed", "4"]).stdout.split()
    S.check(len(long) == 41 and long == again and long != other,
            "generate: sampling (temperature, top-k) past seq_len is reproducible by "
            "seed", f"{long}\n{other}")

    # Text prompts with GPT-2 tokenizer files, against an independent encoder
    # (a model with room for the tokenizer's 407 ids).
    wide = dict(SPEC, model=dict(SPEC["model"], vocab=512))
    wide_spec = S.write_text("wide.yaml", yaml.safe_dump(wide, sort_keys=False))
    wide_bin, wide_init = compile_(wide_spec, "wide"), S.path("wide.safetensors")
    S.reference_tool("make_inputs.py", "--model-yaml", wide_spec, "--init-out", wide_init)
    tok = S.path("tok")
    S.reference_tool("gpt2_bpe.py", "train", "--text", "/usr/share/common-licenses/GPL-3",
                     "--merges", "150", "--out", tok)
    text = "The licenses for most software are designed to take away your freedom!"
    ids = S.reference_tool("gpt2_bpe.py", "encode", "--tokenizer", tok, "--text",
                           text).stdout.strip()
    for files in ("vocab.json", "encoder.json"):
        d = S.path(f"tok-{files}")
        os.makedirs(d)
        pair = ("vocab.json", "merges.txt") if files == "vocab.json" else \
            ("encoder.json", "vocab.bpe")
        for f in pair:
            os.link(os.path.join(tok, f), os.path.join(d, f))
        out = S.run([wide_bin, "--generate", 3, "--init", wide_init, "--prompt", text,
                     "--tokenizer", d, "--print-ids", "--temperature", "0"]).stdout
        lines = out.split("\n")
        printed = lines[-2].split()
        S.check(",".join(printed[:-3]) == ids and lines[0].startswith(text),
                f"generate: the prompt's ids from {files} equal the independent "
                "encoder's, and the printed text starts with the prompt",
                f"{','.join(printed[:-3])}\n{ids}\n{out}")


if GROUP.group == "eval":
    S.case("evaluation", eval_group)
elif GROUP.group == "checkpoints":
    S.case("checkpoints", checkpoints_group)
else:
    S.case("run settings, logs, generation", run_group)
S.finish()
