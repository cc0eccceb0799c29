"""Helpers shared by bench/ddp's scripts: find the strata tools, compile a
plan, run it under mpirun and read its per-step log.

A compiled program's JSONL log (docs/runtime.md) has one line per step with
step_time_s, the slowest rank's wall time of that step.
"""

import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class BenchError(Exception):
    """A step of the benchmark failed; the message says which and why."""


def find_tools(build):
    """-> path of `strata` in BUILD/bin (it finds its launcher and probe beside it)."""
    strata = os.path.join(os.path.abspath(build), "bin", "strata")
    if not os.access(strata, os.X_OK):
        raise BenchError(f"{strata} is missing; build it (ninja -C {build} strata) "
                         "or pass --build DIR")
    return strata


def mpi_env():
    env = dict(os.environ)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def require_mpirun():
    mpirun = shutil.which("mpirun")
    if not mpirun:
        raise BenchError("mpirun not found on PATH; install OpenMPI (openmpi-bin)")
    return mpirun


def run(cmd, what, timeout=900):
    """Runs cmd; returns stdout; raises BenchError with its stderr on failure."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(),
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what}: timed out after {timeout} s: {' '.join(cmd)}")
    if p.returncode != 0:
        raise BenchError(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n"
                         f"{p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def compile_plan(strata, model, ranks, pins, out):
    """-> the plan summary `strata compile` printed ("dp=2 tp=1 ...")."""
    cmd = [strata, "compile", model, "--cluster", f"local:{ranks}", "-o", out]
    for pin in pins:
        cmd += ["--pin", pin]
    stdout = run(cmd, f"strata compile {os.path.basename(model)}")
    m = re.search(r"^plan: (.*)$", stdout, re.M)
    if not m:
        raise BenchError(f"strata compile printed no 'plan:' line:\n{stdout}")
    return m.group(1).strip()


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_program(binary, ranks, steps, log, extra=(), cpu=None):
    """Runs a compiled program for `steps` steps; -> list of per-step dicts.
    With `cpu` a list, appends the CPU seconds the run used (all ranks and
    mpirun: every waited-for descendant)."""
    if os.path.exists(log):
        os.remove(log)
    cmd = [binary, "--steps", str(steps), "--log", log, *extra]
    if ranks > 1:
        cmd = [require_mpirun(), "--oversubscribe", "-np", str(ranks)] + cmd
    before = children_cpu_s()
    run(cmd, f"running {os.path.basename(binary)} on {ranks} rank(s)")
    if cpu is not None:
        cpu.append(children_cpu_s() - before)
    with open(log) as f:
        return [json.loads(line) for line in f if line.strip()]


def median_step_time(steps, warmup):
    times = [s["step_time_s"] for s in steps[warmup:]]
    if not times:
        raise BenchError(f"no steps after the {warmup} warm-up steps")
    return statistics.median(times), times


def print_table(headers, rows, out=sys.stdout):
    """A Markdown table (pastes into docs/ as is)."""
    out.write("| " + " | ".join(headers) + " |\n")
    out.write("|" + "---|" * len(headers) + "\n")
    for r in rows:
        out.write("| " + " | ".join(str(c) for c in r) + " |\n")
    out.flush()
