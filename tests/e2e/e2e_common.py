"""Shared plumbing for the end-to-end tests of `strata compile` and the
training executables it writes.

Every driver is run by ctest as

    /usr/bin/python3 tests/e2e/DRIVER.py --strata build/bin/strata --repo-root .

works in its own temporary directory, prints one line per check and exits 0
only when every check passed. Checks keep going after a failure so that one
run reports everything that is wrong, not just the first thing.
"""

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

PYTHON = "/usr/bin/python3"
# Far above what any command here needs (seconds); a command that runs into it
# is reported as a hang rather than blocking ctest until its own timeout.
COMMAND_TIMEOUT_S = 120

# What OpenMPI needs to start as root (the CI machines run as root); the
# drivers that launch more ranks than cores add oversubscription.
MPI_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
MPI_OVERSUBSCRIBE_ENV = {**MPI_ROOT_ENV, "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def take_groups(groups):
    """Removes --group (repeatable, one of `groups`) from argv, so Session
    parses the rest; returns the chosen groups, all of them by default."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--group", action="append", choices=groups)
    args, rest = p.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    return args.group or list(groups)


class CommandFailed(Exception):
    """A command that was expected to succeed did not."""


class Session:
    """Paths, a scratch directory and the pass/fail tally of one driver."""

    def __init__(self, description):
        p = argparse.ArgumentParser(description=description)
        p.add_argument("--strata", required=True, help="the built strata driver")
        p.add_argument("--repo-root", required=True, help="the Strata source tree")
        p.add_argument("--keep", action="store_true",
                       help="keep the scratch directory and print its path")
        args = p.parse_args()
        self.strata = os.path.abspath(args.strata)
        self.root = os.path.abspath(args.repo_root)
        self.reference = os.path.join(self.root, "tests", "reference")
        self.examples = os.path.join(self.root, "examples", "models")
        self.keep = args.keep
        self.dir = tempfile.mkdtemp(prefix="strata-e2e-")
        self.failures = []
        self.passed = 0
        self.started = time.monotonic()

    # -- paths and files ---------------------------------------------------

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def write_text(self, name, text):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def write_bytes(self, name, data):
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    # -- commands ----------------------------------------------------------

    def run(self, argv, expect_ok=True, timeout=COMMAND_TIMEOUT_S, env=None):
        """Runs argv in the scratch directory; returns the CompletedProcess.

        With expect_ok, a non-zero exit raises CommandFailed carrying the
        command line and its stderr, which the caller reports as one failure.
        A command that outlives `timeout` is a hang, and always an error.
        `env` adds variables to the environment.
        """
        argv = [str(a) for a in argv]
        try:
            proc = subprocess.run(argv, cwd=self.dir, capture_output=True,
                                  text=True, errors="replace", timeout=timeout,
                                  env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired:
            raise CommandFailed(f"hung for more than {timeout} s: {shlex.join(argv)}")
        if expect_ok and proc.returncode != 0:
            raise CommandFailed(
                f"exit {proc.returncode}: {shlex.join(argv)}\n"
                f"--- stderr ---\n{proc.stderr[-4000:]}--- stdout ---\n"
                f"{proc.stdout[-2000:]}")
        return proc

    def compile(self, spec, out, extra=()):
        """`strata compile SPEC --cluster local:1 -o OUT`; returns OUT's path."""
        out = self.path(out)
        self.run([self.strata, "compile", spec, "--cluster", "local:1", "-o", out,
                  *extra])
        return out

    def reference_tool(self, script, *args, expect_ok=True):
        """Runs tests/reference/SCRIPT under the torch-enabled python."""
        return self.run([PYTHON, os.path.join(self.reference, script), *args],
                        expect_ok=expect_ok)

    # -- checks ------------------------------------------------------------

    def case(self, name, fn, *args):
        """Runs one scenario; a command failure or a crash of the driver itself
        counts as one failed check and the next scenario still runs."""
        print(f"== {name}")
        sys.stdout.flush()
        t0 = time.monotonic()
        try:
            fn(*args)
        except CommandFailed as e:
            self.fail(f"{name}: a command failed", str(e))
        except Exception:  # noqa: BLE001 - report, then run the other cases
            self.fail(f"{name}: the test driver raised", traceback.format_exc())
        print(f"   {name}: {time.monotonic() - t0:.1f} s")

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print(f"ok    {what}")
        else:
            self.failures.append(what)
            print(f"FAIL  {what}")
            if detail:
                print("      " + detail.rstrip().replace("\n", "\n      "))
        sys.stdout.flush()
        return ok

    def fail(self, what, detail=""):
        return self.check(False, what, detail)

    def finish(self):
        """Prints the tally and exits the process (0 only if all passed)."""
        elapsed = time.monotonic() - self.started
        if self.keep:
            print(f"scratch directory kept at {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self.failures:
            print(f"\n{len(self.failures)} of {len(self.failures) + self.passed} "
                  f"checks FAILED in {elapsed:.1f} s:")
            for f in self.failures:
                print(f"  - {f}")
            sys.exit(1)
        if self.passed == 0:
            print("no checks ran")
            sys.exit(1)
        print(f"\nall {self.passed} checks passed in {elapsed:.1f} s")
        sys.exit(0)


def read_log(path, raw=False, kind="train"):
    """The records of a JSONL log, in file order: training steps (kind
    "train", the records with a "loss"), evaluations ("eval", with an
    "eval_loss") or run summaries ("summary", the objects under "summary").

    With raw=True, floats stay the exact strings the writer printed, so two
    logs can be compared digit for digit.
    """
    records = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line, parse_float=str) if raw else json.loads(line)
            if kind == "train" and "loss" in rec and "step" in rec:
                records.append(rec)
            elif kind == "eval" and "eval_loss" in rec:
                records.append(rec)
            elif kind == "summary" and "summary" in rec:
                records.append(rec["summary"])
    return records


def descendants(parent, name):
    """The processes called `name` below process `parent` (an mpirun's ranks),
    from /proc."""
    children = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append((int(pid), comm))
    found, todo = [], [parent]
    while todo:
        for pid, comm in children.get(todo.pop(), []):
            todo.append(pid)
            if comm == name[:15]:
                found.append(pid)
    return found


def latest(run_dir):
    """The newest checkpoint of a --save run directory (its `latest`)."""
    return os.path.join(run_dir, "latest")


def rel_diff(a, b):
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


# Text on stderr that means the program crashed or leaked an exception instead
# of reporting the problem.
CRASH_MARKERS = ("terminate called", "Assertion", "Segmentation fault",
                 "AddressSanitizer", "core dumped", "Aborted", "what():")


def snapshot(root):
    """{relative path: sha256 or "dir"} of everything under root."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            state[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = "dir"
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                state[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return state


def describe_changes(before, after):
    lines = [f"new: {p}" for p in sorted(set(after) - set(before))]
    lines += [f"gone: {p}" for p in sorted(set(before) - set(after))]
    lines += [f"changed: {p}" for p in sorted(set(before) & set(after))
              if before[p] != after[p]]
    return "\n".join(lines)


def _needle_text(n):
    return n.pattern if hasattr(n, "pattern") else n


def expect_error(session, label, argv, needles, cli_error=False):
    """Runs argv, which must fail cleanly; checks that
      * the exit status is the documented one: 1 for errors, CLI11's >= 100
        for a malformed flag (cli_error), never a signal;
      * stderr contains every needle (substrings or compiled regexes) and no
        crash text;
      * nothing under the scratch directory changed: every file keeps its
        bytes, none appears or disappears.
    """
    before = snapshot(session.dir)
    proc = session.run(argv, expect_ok=False)
    after = snapshot(session.dir)
    err = proc.stderr
    shown = f"exit {proc.returncode}; stderr:\n{err.strip() or '(empty)'}"
    if cli_error:
        session.check(100 <= proc.returncode < 128,
                      f"{label}: exits with CLI11's status (>= 100)", shown)
    else:
        session.check(proc.returncode == 1, f"{label}: exits 1", shown)
    missing = [_needle_text(n) for n in needles
               if not (n.search(err) if hasattr(n, "search") else n in err)]
    wanted = ", ".join(repr(_needle_text(n)) for n in needles)
    session.check(not missing, f"{label}: stderr says {wanted}",
                  f"missing {missing}; {shown}")
    crash = [m for m in CRASH_MARKERS if m in err]
    session.check(not crash, f"{label}: no crash or raw exception text", shown)
    changes = describe_changes(before, after)
    session.check(not changes, f"{label}: nothing on disk changed", changes)


def train_against_reference(session, name, model, ranks, pins, data, ref_log,
                            steps, rtol):
    """Compiles `model` for local:`ranks` with `pins` (checked in the printed
    plan), trains `steps` steps on `data` (the --init/--data arguments),
    and checks that every step is logged and that loss and grad_norm match
    the reference log within `rtol`."""
    out = session.path(name)
    argv = [session.strata, "compile", model, "--cluster", f"local:{ranks}",
            "-o", out]
    for k, v in pins.items():
        argv += ["--pin", f"{k}={v}"]
    proc = session.run(argv)
    plan = next((l for l in proc.stdout.splitlines() if l.startswith("plan: ")), "")
    print(f"   {plan}")
    words = plan.split()
    for k, v in pins.items():
        # The summary spells the schedule by its name alone.
        session.check(f"{k}={v}" in words or (k == "schedule" and v in words),
                      f"{name}: the plan has {k}={v}", plan)
    log = session.path(f"{name}.jsonl")
    run = [out, *data, "--steps", steps, "--log", log]
    if ranks > 1:
        run = ["mpirun", "--oversubscribe", "-np", ranks, *run]
    session.run(run, env=MPI_OVERSUBSCRIBE_ENV)
    logged = [r["step"] for r in read_log(log)]
    session.check(logged == list(range(1, int(steps) + 1)),
                  f"{name}: logged steps 1..{steps}", f"got {logged}")
    cmp = session.reference_tool("compare_losses.py", log, ref_log, "--rtol",
                                 str(rtol), "--fields", "loss,grad_norm",
                                 expect_ok=False)
    session.check(cmp.returncode == 0,
                  f"{name}: loss and grad_norm match torch (rtol {rtol:g})",
                  cmp.stdout + cmp.stderr)
