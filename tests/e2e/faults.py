#!/usr/bin/python3
"""Faults and bad input on the runtime side (issue 16): no silent wrong
result, no lost data, hung ranks named.

  resume     --resume continues the checkpoint's seed and data stream (one
             rank, dp=2, tp=2); --seed takes any 64-bit value; empty path
             flags, --init with --resume and another --seed are errors.
  outputs    --save is proved writable before the first step; --log never
             replaces an input, a file inside a checkpoint or a file that is
             not a log; FIFOs and devices are refused as --data.
  checkpoints  every file is checksummed (a flipped bit or a truncation is an
             error naming the file); a second writer is locked out; saves
             killed at every file-system step and at random times always
             leave a `latest` that loads; stale temporaries are removed.
  ranks      SIGTERM to both ranks of a dp=2 job checkpoints and exits 0,
             every time; a rank stopped with SIGSTOP is named by the
             heartbeat and ends the job; the log names the slowest rank.
"""

import argparse
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_common import (  # noqa: E402
    CRASH_MARKERS, MPI_OVERSUBSCRIBE_ENV, Session, descendants, expect_error,
    latest, read_log)

GROUP = None
if "--group" in sys.argv:
    i = sys.argv.index("--group")
    GROUP = sys.argv[i + 1]
    del sys.argv[i:i + 2]

S = Session(__doc__)
MPI_ENV = MPI_OVERSUBSCRIBE_ENV


def tiny():
    return os.path.join(S.examples, "gpt-tiny.yaml")


def compile_(name, ranks=1, pins=()):
    out = S.path(name)
    argv = [S.strata, "compile", tiny(), "--cluster", f"local:{ranks}", "-o", out]
    for p in pins:
        argv += ["--pin", p]
    S.run(argv)
    return out


def mpirun(n, binary, *args):
    return ["mpirun", "--oversubscribe", "-np", str(n), binary, *[str(a) for a in args]]


def losses(path):
    return [r["loss"] for r in read_log(path, raw=True)]


# -- resume ----------------------------------------------------------------------


def resume_group():
    one = compile_("one")
    dp2 = compile_("dp2", 2, ["dp=2"])
    tp2 = compile_("tp2", 2, ["tp=2"])
    env = {**os.environ, **MPI_ENV}
    for label, argv in (("1 rank", [one]), ("dp=2", mpirun(2, dp2)),
                        ("tp=2", mpirun(2, tp2))):
        tag = label.replace(" ", "").replace("=", "")
        full, part = S.path(f"full-{tag}.jsonl"), S.path(f"part-{tag}.jsonl")
        ck = S.path(f"ck-{tag}")
        S.run(argv + ["--seed", 99, "--steps", 4, "--log", full], env=env)
        S.run(argv + ["--seed", 99, "--steps", 2, "--save", ck, "--log", part], env=env)
        proc = S.run(argv + ["--steps", 4, "--resume", ck, "--log", part], env=env)
        S.check("seed 99" in proc.stderr,
                f"resume ({label}): the resumed run says it uses the checkpoint's "
                "seed 99", proc.stderr[-600:])
        S.check(losses(part) == losses(full),
                f"resume ({label}): steps 3-4 after --resume, without --seed, equal "
                "the uninterrupted --seed 99 run digit for digit",
                f"{losses(part)} vs {losses(full)}")
        if label != "1 rank":
            continue
        expect_error(S, "resume: another --seed", argv + [
            "--steps", 6, "--resume", ck, "--seed", 5],
            ["--seed 5 differs from the seed 99", "drop --seed"])
    ck = S.path("ck-1rank")
    expect_error(S, "--init with --resume", [one, "--steps", 6, "--resume", ck,
                                             "--init", ck], ["--init", "--resume",
                                                             "drop one of them"])
    top = str(2 ** 64 - 1)
    proc = S.run([one, "--seed", top, "--info"])
    S.check(f"seed {top} (--seed)" in proc.stdout,
            "--seed 2^64-1 is taken exactly, not clamped", proc.stdout[:400])
    expect_error(S, "--seed 2^64", [one, "--seed", str(2 ** 64), "--info"],
                 ["--seed", "18446744073709551615"], cli_error=True)
    for flag in ("--data", "--save", "--log", "--resume", "--init", "--eval-data"):
        expect_error(S, f"{flag} ''", [one, "--steps", 1, flag, ""],
                     [flag, "must not be empty"], cli_error=True)


# -- outputs ---------------------------------------------------------------------


def outputs_group():
    one = compile_("one")
    data = S.path("train.bin")
    # Tokens below the vocab (512): uint16 values 0..255.
    with open(data, "wb") as f:
        f.write(b"".join(int(v).to_bytes(2, "little")
                         for v in random.Random(1).choices(range(256), k=4096)))
    # An unwritable --save fails before the first step (root ignores
    # permissions; /proc refuses new directories to everyone).
    log = S.path("ro.jsonl")
    proc = S.run([one, "--steps", 50, "--save", "/proc/strata-ck", "--log", log],
                 expect_ok=False)
    S.check(proc.returncode == 1 and "--save /proc/strata-ck" in proc.stderr
            and not (os.path.exists(log) and read_log(log)),
            "an unwritable --save fails at start-up, before "
            "any step", f"exit {proc.returncode}: {proc.stderr[-500:]}")
    ck = S.path("ck")
    S.run([one, "--steps", 2, "--save", ck])
    notes = S.write_text("notes.txt", "my notes\n")
    expect_error(S, "--log names the --data file", [one, "--steps", 1, "--data", data,
                                                    "--log", data], ["--log", "input"])
    expect_error(S, "--log names the executable", [one, "--steps", 1, "--log", one],
                 ["--log", "input"])
    model = os.path.join(latest(ck), "model.safetensors")
    expect_error(S, "--log inside the --resume checkpoint",
                 [one, "--steps", 3, "--resume", ck, "--log", model],
                 ["--log", "inside --resume"])
    expect_error(S, "--log inside the --save directory",
                 [one, "--steps", 3, "--resume", ck, "--save", ck, "--log",
                  os.path.join(ck, "x.jsonl")], ["--log", "inside --save"])
    expect_error(S, "--log names a file that is not a log",
                 [one, "--steps", 1, "--log", notes], ["--log", "not a Strata training log"])
    # Outside the scratch directory, which expect_error reads whole.
    fifo_dir = tempfile.mkdtemp(prefix="strata-fifo-")
    fifo = os.path.join(fifo_dir, "fifo")
    os.mkfifo(fifo)
    expect_error(S, "--data names a FIFO", [one, "--steps", 1, "--data", fifo],
                 ["--data", "not a regular file"])
    shutil.rmtree(fifo_dir)
    expect_error(S, "--data /dev/zero", [one, "--steps", 1, "--data", "/dev/zero"],
                 ["--data /dev/zero", "not a regular file"])
    expect_error(S, "compile --launcher /bin/true",
                 [S.strata, "compile", tiny(), "--cluster", "local:1", "-o", "true-bin",
                  "--launcher", "/bin/true"], ["--launcher /bin/true",
                                               "not a strata-launcher"])


# -- checkpoints -----------------------------------------------------------------


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x10]))


def checkpoints_group():
    one = compile_("one")
    dp2 = compile_("dp2", 2, ["dp=2"])
    env = {**os.environ, **MPI_ENV}
    ck = S.path("ck")
    S.run([one, "--steps", 2, "--save", ck])
    S.run(mpirun(2, dp2, "--steps", 2, "--save", S.path("ck2")), env=env)
    with open(os.path.join(latest(ck), "trainer.json")) as f:
        state = json.load(f)
    S.check(sorted(state.get("files", {})) == ["config.json", "model.safetensors",
                                               "optimizer.safetensors"]
            and state.get("checksum", "").startswith("crc32:"),
            "trainer.json records every file's size and CRC-32, and its own",
            json.dumps(state)[:400])
    # One flipped bit anywhere is found, and the error names the file.
    for rel, where in (("model.safetensors", 4000), ("optimizer.safetensors", -5),
                       ("trainer.json", 30)):
        bad = S.path(f"bad-{rel}")
        shutil.copytree(latest(ck), bad)
        path = os.path.join(bad, rel)
        flip(path, where if where >= 0 else os.path.getsize(path) + where)
        expect_error(S, f"a flipped bit in {rel}", [one, "--steps", 3, "--resume", bad],
                     [f"bad-{rel}/{rel}", "damaged"])
    bad = S.path("bad-rank")
    shutil.copytree(latest(S.path("ck2")), bad)
    flip(os.path.join(bad, "rank-00001.safetensors"), 3000)
    expect_error(S, "a flipped bit in a rank file (dp=2)",
                 mpirun(2, dp2, "--steps", 3, "--resume", bad),
                 ["rank-00001.safetensors", "checksum mismatch"])
    bad = S.path("bad-trunc")
    shutil.copytree(latest(ck), bad)
    with open(os.path.join(bad, "model.safetensors"), "r+b") as f:
        f.truncate(100)
    expect_error(S, "a truncated model.safetensors", [one, "--steps", 3, "--resume", bad],
                 ["bad-trunc/model.safetensors", "truncated"])

    # Fields are type-checked (a checkpoint without checksums, as written
    # before them, still loads, so the fields are its only guard).
    for field, value in (("seed", -1), ("step", 1.5), ("data_position", "16")):
        bad = S.path(f"bad-field-{field}")
        shutil.copytree(latest(ck), bad)
        with open(os.path.join(bad, "trainer.json")) as f:
            state = json.load(f)
        state.pop("checksum")
        state.pop("files")
        state[field] = value
        with open(os.path.join(bad, "trainer.json"), "w") as f:
            json.dump(state, f)
        expect_error(S, f"trainer.json with {field} {value!r}",
                     [one, "--steps", 3, "--resume", bad],
                     [f"bad-field-{field}/trainer.json", f"'{field}'",
                      "non-negative integer"])

    # A second job saving to the same run directory is locked out.
    run = S.path("locked")
    log = S.path("locked.jsonl")
    first = subprocess.Popen([one, "--steps", "100000", "--save", run, "--log", log],
                             cwd=S.dir, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (os.path.exists(log) and read_log(log)):
        time.sleep(0.05)
    second = S.run([one, "--steps", 2, "--save", run], expect_ok=False)
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=60)
    S.check(second.returncode == 1 and "another run (pid" in second.stderr
            and "is saving checkpoints here" in second.stderr,
            "a second writer to the run directory fails at start-up, naming the "
            "first", second.stderr[-400:])
    S.check(first.returncode == 0 and os.path.isdir(latest(run)),
            "the first writer is undisturbed and checkpoints on SIGTERM")

    # Saves killed at every file-system step: `latest` always loads.
    base = S.path("base")
    S.run([one, "--steps", 2, "--save", base, "--save-every", 1, "--keep-last", 2])
    point, complete = 1, False
    while not complete and point < 80:
        run = S.path(f"kill-{point}")
        shutil.copytree(base, run, symlinks=True)
        proc = S.run([one, "--steps", 4, "--resume", run, "--save", run,
                      "--save-every", 1, "--keep-last", 2],
                     expect_ok=False, env={"STRATA_TEST_SAVE_CRASH": str(point)})
        complete = proc.returncode == 0
        check_loads(one, run, f"killed at save point {point}", proc)
        point += 1
    S.check(complete and point > 10, f"saves were killed at each of their {point - 2} "
            "file-system steps", f"{point}")

    # ... and at random times (one rank, and both ranks of a dp=2 job).
    rng = random.Random(16)
    kills = int(os.environ.get("STRATA_FAULTS_KILLS", "12"))
    for i in range(kills):
        multi = i % 3 == 2
        run = S.path(f"random-{i}")
        shutil.copytree(base if not multi else S.path("ck2"), run, symlinks=True)
        argv = ([one] if not multi else mpirun(2, dp2)) + [
            "--steps", "1000", "--resume", run, "--save", run, "--save-every", "1",
            "--keep-last", "2"]
        proc = subprocess.Popen(argv, cwd=S.dir, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.3, 2.5))
        targets = descendants(proc.pid, "dp2") if multi else [proc.pid]
        for pid in targets:
            os.kill(pid, signal.SIGKILL)
        if multi:
            proc.wait(timeout=60)
        proc.communicate(timeout=60)
        check_loads(one if not multi else None, run, f"random kill {i}"
                    f"{' (dp=2)' if multi else ''}", proc, dp2 if multi else None)


def check_loads(one, run, label, proc, dp2=None):
    """`latest` of `run` resumes; the next start removes stale temporaries."""
    with open(os.path.join(run, "latest", "index.json" if dp2 else "trainer.json")) as f:
        step = json.load(f)["step"]
    argv = ([one] if dp2 is None else mpirun(2, dp2)) + [
        "--steps", step + 1, "--resume", run, "--save", run]
    res = S.run(argv, expect_ok=False, env=MPI_ENV)
    stale = [n for n in os.listdir(run) if ".tmp-" in n or ".old-" in n
             or n.startswith(".latest-")]
    S.check(res.returncode == 0 and not stale,
            f"{label}: latest (step {step}) resumes, and no temporary is left",
            f"exit {res.returncode}; stale {stale}; {res.stderr[-600:]}")


# -- ranks -------------------------------------------------------------------------


def wait_for_steps(log, n, proc, limit=90):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(log) and len(read_log(log)) >= n:
            return True
        time.sleep(0.05)
    return False


def ranks_group():
    dp2 = compile_("dp2", 2, ["dp=2"])
    env = {**os.environ, **MPI_ENV}
    runs = int(os.environ.get("STRATA_FAULTS_SIGTERMS", "10"))
    bad = []
    for i in range(runs):
        log, run = S.path(f"term-{i}.jsonl"), S.path(f"term-{i}")
        proc = subprocess.Popen(mpirun(2, dp2, "--steps", 400, "--log", log, "--save",
                                       run), cwd=S.dir, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for_steps(log, 2 + i % 4, proc)
        ranks = descendants(proc.pid, "dp2")
        for pid in ranks:
            os.kill(pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
        if proc.returncode != 0 or any(m in err for m in CRASH_MARKERS) or \
                "SIGTERM received" not in err:
            bad.append(f"run {i}: exit {proc.returncode}\n{err[-1500:]}")
    S.check(not bad, f"SIGTERM to both ranks of a dp=2 job: {runs} of {runs} runs "
            "checkpoint and exit 0", "\n".join(bad))
    S.check(all(os.path.isdir(latest(S.path(f"term-{i}"))) for i in range(runs)),
            "every SIGTERM run left a checkpoint")

    # A stopped rank: the heartbeat names it and ends the job.
    log = S.path("stop.jsonl")
    proc = subprocess.Popen(mpirun(2, dp2, "--steps", "100000", "--log", log), cwd=S.dir,
                            env={**env, "STRATA_HEARTBEAT_TIMEOUT_S": "4"}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_steps(log, 3, proc)
    ranks = sorted(descendants(proc.pid, "dp2"))
    stopped = ranks[1] if len(ranks) == 2 else None
    if stopped:
        os.kill(stopped, signal.SIGSTOP)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        err = "(hung)\n" + err
    finally:
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    S.check(stopped and proc.returncode != 0 and "no heartbeat from rank 1" in err
            and "rank 1 has stopped running" in err,
            "a rank stopped with SIGSTOP is named by the heartbeat and the job ends",
            f"exit {proc.returncode}\n{err[-1200:]}")
    records = read_log(log)
    S.check(records and all("slowest_rank" in r and r["slowest_rank"] in (0, 1)
                            and r["slowest_rank_lag_s"] >= 0 for r in records),
            "every step record names the slowest rank and its lag",
            json.dumps(records[:2]))


GROUPS = {"resume": resume_group, "outputs": outputs_group,
          "checkpoints": checkpoints_group, "ranks": ranks_group}
for name, fn in GROUPS.items():
    if GROUP in (None, name):
        S.case(name, fn)
S.finish()
