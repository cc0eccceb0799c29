"""`strata plan --html` and `--trace` for the acceptance cases, checked in a
real browser: headless Chromium loads each report, runs its script, and
the test reads back the DOM (no script errors, every view drawn) and writes
a screenshot as an artefact (ARTIFACTS/<case>.png). The simulated traces
are checked against the Chrome trace format (chrome_trace.py).

    python3 html_report.py --strata build/bin/strata --repo-root . \
        [--artifacts DIR]

Exits 77 (ctest's skip code) when Chromium is not installed; install it
with scripts/install-deps.sh (Debian package `chromium`).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chrome_trace  # noqa: E402

CASES = [
    ("gpt2-small-dgx-a100-4", "examples/models/gpt2-small.yaml", "dgx-a100:4"),
    ("gpt3-175b-dgx-h100-128", "examples/models/gpt3-175b.yaml", "dgx-h100:128"),
]
VIEWS = ["plan", "timeline", "devices", "memory", "runners-up", "search"]

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def browser(exe, args, url, timeout=180):
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-dev-shm-usage", "--no-first-run",
           "--disable-background-networking", "--enable-logging=stderr",
           "--v=0", "--virtual-time-budget=10000"] + args + [url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def check_trace(name, path, plan):
    with open(path) as f:
        doc = json.load(f)
    problems = chrome_trace.validate(doc)
    check(not problems, "%s: simulated trace is a valid Chrome trace %s"
          % (name, problems[:3] if problems else ""))
    cats = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            cats[e.get("cat")] = cats.get(e.get("cat"), 0) + 1
    layers = [e for e in doc["traceEvents"]
              if e.get("cat") == "layer-forward" and "flops" in e.get("args", {})]
    check(len(layers) > 0 and all(e["args"]["flops"] > 0 and e["args"]["bytes"] > 0
                                  and e["args"]["op_mix"] for e in layers),
          "%s: per-layer events carry FLOPs, bytes and the op mix" % name)
    if plan["tp"] > 1:
        check(cats.get("tp-comm", 0) > 0, "%s: tp collectives on their track" % name)
    if plan["pp"] > 1:
        check(cats.get("pp-send", 0) > 0, "%s: pipeline sends on their track" % name)
    if plan["dp"] > 1 and plan["zero"] < 3:
        check(cats.get("dp-bucket", 0) + cats.get("dp-reduce", 0) > 0,
              "%s: gradient reduction on the dp track" % name)
    if plan["dp"] > 1 and plan["zero"] >= 3:
        check(cats.get("zero-gather", 0) > 0, "%s: ZeRO-3 gathers" % name)


def check_page(name, html_path, exe, artifacts):
    with open(html_path) as f:
        html = f.read()
    external = re.findall(r'(?:src|href)\s*=\s*["\']?(?:https?:)?//', html)
    check(not external and "<link" not in html,
          "%s: self-contained (no external scripts, styles or links)" % name)
    if exe is None:
        return
    url = "file://" + os.path.abspath(html_path)
    dom = browser(exe, ["--dump-dom"], url)
    check(dom.returncode == 0, "%s: chromium --dump-dom exits 0" % name)
    out = dom.stdout
    console = [l for l in dom.stderr.splitlines()
               if "CONSOLE" in l and ("Uncaught" in l or "Error" in l)]
    check(not console, "%s: no console errors %s" % (name, console[:2]))
    check('data-status="ok"' in out, "%s: the script ran to the end (data-status=ok)"
          % name)
    m = re.search(r'<pre id="errors">(.*?)</pre>', out, re.S)
    check(m is not None and not m.group(1).strip(),
          "%s: no script errors reported %s" % (name, m.group(1)[:200] if m else ""))
    for view in VIEWS:
        check('<section id="%s"' % view in out, "%s: view #%s present" % (name, view))
    counts = {
        "timeline events": len(re.findall(r'class="ev ev-', out)),
        "bubble shading": len(re.findall(r'class="bubble"', out)),
        "memory bars": len(re.findall(r'class="mem mem-', out)),
        "device limit line": len(re.findall(r'class="limit"', out)),
        "device map units": len(re.findall(r'class="unit"', out)),
        "group table": len(re.findall(r'<table class="groups"', out)),
        "runners-up table": len(re.findall(r'<table class="runners"', out)),
    }
    for what, n in counts.items():
        check(n > 0, "%s: %s drawn (%d)" % (name, what, n))
    shot = os.path.join(artifacts, name + ".png")
    if os.path.exists(shot):
        os.remove(shot)
    r = browser(exe, ["--screenshot=" + shot, "--window-size=1280,3600",
                      "--hide-scrollbars"], url)
    check(r.returncode == 0 and os.path.getsize(shot) > 10000 if os.path.exists(shot)
          else False, "%s: screenshot written to %s" % (name, shot))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--repo-root", required=True)
    ap.add_argument("--artifacts", default="report-artifacts")
    a = ap.parse_args()
    exe = chromium()
    os.makedirs(a.artifacts, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="strata-report-")
    for name, model, cluster in CASES:
        html = os.path.join(a.artifacts, name + ".html")
        trace = os.path.join(tmp, name + ".trace.json")
        cmd = [a.strata, "plan", os.path.join(a.repo_root, model), "--cluster",
               cluster, "--top", "4", "--html", html, "--trace", trace, "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if not check(r.returncode == 0, "%s: strata plan --html --trace exits 0 %s"
                     % (name, r.stderr[-300:])):
            continue
        plan = json.loads(r.stdout)["plan"]
        print("     plan: dp=%d tp=%d pp=%d vpp=%d zero=%d" %
              (plan["dp"], plan["tp"], plan["pp"], plan["vpp"], plan["zero"]))
        check_trace(name, trace, plan)
        check_page(name, html, exe, a.artifacts)
    # A path that cannot be written is a user error naming the flag.
    r = subprocess.run([a.strata, "plan", os.path.join(a.repo_root, CASES[0][1]),
                        "--cluster", "dgx-a100:4", "--html", "/nonexistent/dir/r.html"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode != 0 and "--html /nonexistent/dir/r.html" in r.stderr,
          "an unwritable --html path fails naming the flag")
    shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    if exe is None:
        print("SKIP the browser checks: no chromium on PATH (Debian package "
              "`chromium`; scripts/install-deps.sh installs it)")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
