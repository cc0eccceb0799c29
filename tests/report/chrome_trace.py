"""Checks a file against the Chrome trace event format (the JSON object
form: {"traceEvents": [...]}; Google's "Trace Event Format" document), as
Perfetto and chrome://tracing read it, plus Strata's track conventions
(docs/report.md): every complete event on a named thread.

Usable as a module (validate(doc) -> list of problems) or a command:
    python3 chrome_trace.py FILE...   # exit 1 and one line per problem
"""
import json
import numbers
import sys

PHASES = set("BEXIiCbneSTpFsftPONDMRcvV(){}")
METADATA = {"process_name", "process_labels", "process_sort_index",
            "thread_name", "thread_sort_index"}


def _number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def validate(doc, max_problems=20):
    problems = []

    def bad(i, msg):
        if len(problems) < max_problems:
            problems.append("event %d: %s" % (i, msg))

    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["the document is not an object with a traceEvents array"]
    if "displayTimeUnit" in doc and doc["displayTimeUnit"] not in ("ms", "ns"):
        problems.append("displayTimeUnit must be ms or ns")
    named = set()
    complete = []
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            bad(i, "not an object")
            continue
        ph = e.get("ph")
        if not isinstance(ph, str) or ph not in PHASES:
            bad(i, "phase %r is not a trace event phase" % (ph,))
            continue
        for key in ("pid", "tid"):
            if key in e and not isinstance(e[key], (int, str)):
                bad(i, "%s must be an integer or string" % key)
        if "args" in e and not isinstance(e["args"], dict):
            bad(i, "args must be an object")
        if ph == "M":
            if e.get("name") not in METADATA:
                bad(i, "metadata name %r is not one of %s" % (e.get("name"), sorted(METADATA)))
            if not isinstance(e.get("args"), dict):
                bad(i, "metadata without args")
            if e.get("name") == "thread_name":
                named.add((e.get("pid"), e.get("tid")))
            continue
        if not isinstance(e.get("name"), str):
            bad(i, "name must be a string")
        if "cat" in e and not isinstance(e["cat"], str):
            bad(i, "cat must be a string")
        if not _number(e.get("ts")):
            bad(i, "ts must be a number (microseconds)")
        if ph == "X":
            if not _number(e.get("dur")) or e["dur"] < 0:
                bad(i, "complete event needs dur >= 0")
            if "pid" not in e or "tid" not in e:
                bad(i, "complete event needs pid and tid")
            complete.append((i, e))
    for i, e in complete:
        if (e.get("pid"), e.get("tid")) not in named:
            bad(i, "on pid %r tid %r, which has no thread_name" % (e.get("pid"), e.get("tid")))
    if not complete:
        problems.append("no complete (X) events")
    return problems


def main(paths):
    ok = True
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for p in validate(doc):
            print("%s: %s" % (path, p))
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
