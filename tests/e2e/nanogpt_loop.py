#!/usr/bin/python3
"""The nanoGPT loop on real English text, end to end (the acceptance test of
the training-workflow issue):

  1. GPT-2 byte-level BPE files (vocab.json + merges.txt) trained on the
     licence texts Debian ships in /usr/share/common-licenses (no GPT-2
     vocabulary ships here; the files have GPT-2's formats and alphabet),
     and nanoGPT's train.bin / val.bin (uint16) tokenized with them;
  2. a GPT trained on 2 ranks (dp=2) with evaluation on val.bin and the
     default random-window sampling, checkpointing every 20 steps;
  3. SIGTERM to the ranks mid-run: the job finishes its step, checkpoints
     and exits 0;
  4. resumed on 1 rank (another plan) with the same --log, which then holds
     every step once;
  5. the checkpoint consolidated to one model.safetensors + config.json,
     loaded in the PyTorch reference: the same validation loss;
  6. text generated from a text prompt: greedy tokens equal the reference's,
     and the printed text is the decoding of those tokens.
"""

import json
import os
import signal
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "reference"))
import gpt2_bpe  # noqa: E402
import safetensors_io  # noqa: E402
from e2e_common import MPI_OVERSUBSCRIBE_ENV, Session, descendants, latest, read_log, rel_diff  # noqa: E402

S = Session(__doc__)
LICENSES = "/usr/share/common-licenses"
MPI_ENV = MPI_OVERSUBSCRIBE_ENV
STEPS, EVAL_EVERY, EVAL_BATCHES = 100, 20, 4
SPEC = {"model": {"family": "gpt", "vocab": 512, "seq_len": 32, "hidden": 64,
                  "heads": 4, "layers": 2},
        "training": {"global_batch": 8, "micro_batch": 4,
                     "optimizer": {"kind": "adamw", "lr": 6.0e-3, "weight_decay": 0.01},
                     "schedule": {"kind": "cosine", "warmup_steps": 4,
                                  "total_steps": STEPS, "min_lr": 6.0e-4},
                     "grad_clip": 1.0, "seed": 3}}


def loop():
    # 1. Tokenizer and nanoGPT token files from real text.
    texts = sorted(os.path.join(LICENSES, f) for f in os.listdir(LICENSES)
                   if os.path.isfile(os.path.join(LICENSES, f)))
    val_text = [t for t in texts if t.endswith("Apache-2.0")]
    train_text = [t for t in texts if t not in val_text]
    tok = S.path("gpt2-tokenizer")
    S.reference_tool("gpt2_bpe.py", "train", "--text", *train_text, "--merges", "255",
                     "--out", tok)
    with open(os.path.join(tok, "vocab.json")) as f:
        S.check(len(json.load(f)) == 512, "tokenizer: 256 bytes + 255 merges + "
                "<|endoftext|> = 512 ids")
    train_bin, val_bin = S.path("train.bin"), S.path("val.bin")
    n = int(S.reference_tool("gpt2_bpe.py", "tokens", "--tokenizer", tok, "--text-file",
                             *train_text, "--out", train_bin).stdout)
    S.reference_tool("gpt2_bpe.py", "tokens", "--tokenizer", tok, "--text-file",
                     *val_text, "--out", val_bin)
    S.check(n > 50000, f"train.bin: {n} GPT-2 BPE tokens of English text")

    spec = S.write_text("gpt.yaml", yaml.safe_dump(SPEC, sort_keys=False))
    two, one = S.path("gpt-dp2"), S.path("gpt-1")
    S.run([S.strata, "compile", spec, "--cluster", "local:2", "--pin", "dp=2", "-o", two])
    S.run([S.strata, "compile", spec, "--cluster", "local:1", "-o", one])

    # 2-3. Train on 2 ranks with evaluation; SIGTERM the ranks mid-run.
    log, run = S.path("train.jsonl"), S.path("run")
    argv = ["mpirun", "--oversubscribe", "-np", "2", two, "--data", train_bin,
            "--eval-data", val_bin, "--eval-every", str(EVAL_EVERY), "--eval-batches",
            str(EVAL_BATCHES), "--steps", str(STEPS), "--save", run, "--save-every",
            str(EVAL_EVERY), "--log", log]
    proc = subprocess.Popen(argv, cwd=S.dir, env={**os.environ, **MPI_ENV}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(log) and len(read_log(log)) >= 14:
            break
        time.sleep(0.05)
    ranks = descendants(proc.pid, os.path.basename(two))
    for pid in ranks:
        os.kill(pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    stopped = read_log(log)[-1]["step"]
    S.check(len(ranks) == 2 and proc.returncode == 0 and 14 <= stopped < STEPS
            and f"SIGTERM received: stopped after step {stopped}" in err,
            f"SIGTERM to both ranks: the job stops after step {stopped}, checkpoints "
            "and exits 0", f"exit {proc.returncode}\n{err[-1500:]}")
    S.check(os.path.realpath(latest(run)).endswith(f"step-{stopped:08d}"),
            f"the run directory's latest is step-{stopped:08d}")
    S.check("(random)" in err, "training sampled random windows (the default)", err[:400])

    # 4. Resume on 1 rank, another plan, the same log.
    S.run([one, "--data", train_bin, "--eval-data", val_bin, "--eval-every",
           str(EVAL_EVERY), "--eval-batches", str(EVAL_BATCHES), "--steps", str(STEPS),
           "--resume", run, "--save", run, "--log", log])
    steps = [r["step"] for r in read_log(log)]
    S.check(steps == list(range(1, STEPS + 1)), f"the log holds steps 1..{STEPS} once "
            "each across the preemption and the 1-rank resume", f"{steps}")
    evals = read_log(log, kind="eval")
    S.check([e["step"] for e in evals] == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)),
            f"validation loss logged every {EVAL_EVERY} steps", json.dumps(evals))
    losses = [e["eval_loss"] for e in evals]
    S.check(losses[-1] < losses[0] - 0.1, f"the validation loss falls: {losses}")

    # 5. Consolidate; the PyTorch reference gets the same validation loss.
    out_dir = S.path("hf")
    os.makedirs(out_dir)
    weights = os.path.join(out_dir, "model.safetensors")
    S.run([S.strata, "checkpoint", "consolidate", run, "-o", weights])
    with open(os.path.join(out_dir, "config.json")) as f:
        config = json.load(f)
    S.check(config["model_type"] == "gpt2" and config["vocab_size"] == 512
            and config["n_positions"] == 32, "consolidated: config.json for GPT-2",
            json.dumps(config))
    ref = S.reference_tool("infer.py", "eval", "--model-yaml", spec, "--weights", weights,
                           "--data", val_bin, "--batches", str(EVAL_BATCHES))
    want = json.loads(ref.stdout)["loss"]
    S.check(rel_diff(losses[-1], want) < 1e-5, f"the PyTorch reference's validation loss "
            f"of the consolidated weights ({want:.6f}) equals Strata's ({losses[-1]:.6f})")

    # 6. Generate from a text prompt.
    prompt = "The licenses for most software"
    out = S.run([one, "--generate", 24, "--resume", run, "--prompt", prompt,
                 "--tokenizer", tok, "--temperature", "0", "--print-ids"]).stdout
    text, ids = out.rstrip("\n").rsplit("\n", 1)
    ids = ids.split()
    prompt_ids = ",".join(map(str, gpt2_bpe.Encoder.load(tok).encode(prompt)))
    greedy = S.reference_tool("infer.py", "greedy", "--model-yaml", spec, "--weights",
                              weights, "--prompt-ids", prompt_ids, "--count", "24")
    S.check(ids == greedy.stdout.split(), "generation: the greedy continuation equals "
            "the PyTorch reference's", f"{ids}\n{greedy.stdout}")
    decoded = gpt2_bpe.Encoder.load(tok).decode([int(i) for i in ids])
    S.check(text == decoded and text.startswith(prompt), "generation: the printed text "
            f"is the decoding of those tokens: {text!r}", f"{decoded!r}")


S.case("nanoGPT loop on real text", loop)
S.finish()
