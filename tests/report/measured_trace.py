"""`BIN --trace FILE --trace-steps A..B` on 4 local ranks through
bench/trace/trace_compare.py (the documented command): the measured trace
is a valid Chrome trace with one process per rank on the planner's tracks,
collectives on their group's track with bytes, pipeline transfers on the
pp track; the simulated trace of the same plan is valid too; and the
predicted-vs-measured table is printed.

    python3 measured_trace.py --build build --repo-root .
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chrome_trace  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--repo-root", required=True)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="strata-measured-")
    script = os.path.join(a.repo_root, "bench", "trace", "trace_compare.py")
    r = subprocess.run([sys.executable, script, "--build", a.build, "--work", work,
                        "--steps", "2", "--trace-steps", "2"],
                       capture_output=True, text=True, timeout=900)
    print(r.stdout)
    if not check(r.returncode == 0, "trace_compare.py exits 0 " + r.stderr[-500:]):
        return 1
    check("| step |" in r.stdout and "| compute |" in r.stdout,
          "the predicted-vs-measured table is printed")
    with open(os.path.join(work, "measured.json")) as f:
        measured = json.load(f)
    with open(os.path.join(work, "predicted.json")) as f:
        predicted = json.load(f)
    for name, doc in (("measured", measured), ("predicted", predicted)):
        problems = chrome_trace.validate(doc)
        check(not problems, "%s trace is a valid Chrome trace %s" % (name, problems[:3]))
    x = [e for e in measured["traceEvents"] if e.get("ph") == "X"]
    check(sorted({e["pid"] for e in x}) == [0, 1, 2, 3], "one process per rank")
    check(all(e["args"].get("step") == 2 for e in x), "only step 2 was traced")
    by_track = {}
    for e in x:
        by_track.setdefault(e["tid"], []).append(e)
    check(len(by_track.get(0, [])) > 50, "every instruction on the compute track")
    # dp=2 pp=2: gradient collectives on the dp track, transfers on the pp
    # track, each with the bytes it moves.
    dp = [e for e in by_track.get(3, []) if e["cat"] == "dp-comm"]
    pp = [e for e in by_track.get(2, []) if e["cat"] == "pp-comm"]
    check(dp and all(e["args"].get("bytes", 0) > 0 for e in dp),
          "dp collectives on the dp track with bytes (%d)" % len(dp))
    check(pp and all(e["args"].get("bytes", 0) > 0 for e in pp),
          "pipeline transfers on the pp track with bytes (%d)" % len(pp))
    names = {e["name"].split(" (")[0] for e in x}
    check(any(n.startswith("matmul") for n in names), "kernels named by opcode")
    steps = [e for e in x if e["cat"] == "step"]
    check(len(steps) == 4 and all(e["args"]["step_time_s"] > 0 for e in steps),
          "each rank's step span carries the measured step time")
    sim = {e.get("cat") for e in predicted["traceEvents"] if e.get("ph") == "X"}
    check({"forward", "backward", "pp-send", "optimizer"} <= sim,
          "the simulated trace has ops, sends and the optimizer")
    # The report of the compiled plan shows the run (strata plan --measured).
    exe = shutil.which("chromium")
    if exe:
        url = "file://" + os.path.join(work, "report.html")
        dom = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu",
                              "--disable-dev-shm-usage", "--dump-dom", url],
                             capture_output=True, text=True, timeout=180).stdout
        check('data-status="ok"' in dom and '<section id="measured"' in dom
              and '<table class="measured-table"' in dom
              and dom.count('class="mev"') > 100,
              "the HTML report draws the measured run beside the prediction")
    else:
        print("skip the HTML check of the measured run: no chromium")
    # Flag errors name the flag and exit non-zero on every rank.
    mpirun = shutil.which("mpirun")
    binary = os.path.join(work, "train")
    for extra, want in ((["--trace", os.path.join(work, "x.json"), "--trace-steps",
                          "3..2"], "--trace-steps 3..2: expected A..B"),
                        (["--trace-steps", "2"], "--trace-steps needs --trace")):
        r = subprocess.run([mpirun, "--oversubscribe", "-np", "4", binary, "--steps",
                            "1"] + extra, capture_output=True, text=True, timeout=300)
        ok = r.returncode != 0 and want in r.stderr
        check(ok, "%s fails naming the flag %s"
              % (" ".join(extra[-2:]), "" if ok else r.stderr[-300:]))
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
