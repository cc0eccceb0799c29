#!/usr/bin/python3
"""Compares two per-step JSONL training logs.

  /usr/bin/python3 tests/reference/compare_losses.py strata.jsonl ref.jsonl \
      [--rtol 1e-4] [--atol 0] [--fields loss[,grad_norm,lr]]

Lines are JSON objects; those with a "step" key are step records (others, such
as a header line, are ignored). A value passes when
|a - b| <= atol + rtol * max(|a|, |b|). Prints one table row per step and exits
0 when every step matches, 1 on a mismatch or when the two logs hold different
steps, 2 when a log cannot be read.
"""

import argparse
import json
import math
import sys


def read_log(path, fields):
    records = {}
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    with f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not a JSON object: {e.msg}") from None
            if not isinstance(obj, dict) or "step" not in obj:
                continue
            step = obj["step"]
            if not isinstance(step, int) or isinstance(step, bool):
                raise ValueError(f"{path}:{lineno}: \"step\" must be an integer")
            if step in records:
                raise ValueError(f"{path}:{lineno}: step {step} appears twice")
            for k in fields:
                v = obj.get(k)
                if not isinstance(v, (int, float)) or isinstance(v, bool):
                    raise ValueError(f"{path}:{lineno}: step {step} has no numeric \"{k}\"")
            records[step] = obj
    return records


def close(a, b, rtol, atol):
    if math.isnan(a) or math.isnan(b):
        return False
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def compare(a, b, fields, rtol, atol, out=sys.stdout):
    """Prints the table; returns True when both logs match everywhere."""
    ok = True
    steps_a, steps_b = set(a), set(b)
    if steps_a != steps_b:
        ok = False
        only_a = sorted(steps_a - steps_b)
        only_b = sorted(steps_b - steps_a)
        print(f"step sets differ: {len(a)} vs {len(b)} steps; only in first: {only_a[:10]}"
              f"{'...' if len(only_a) > 10 else ''}; only in second: {only_b[:10]}"
              f"{'...' if len(only_b) > 10 else ''}", file=out)
    head = f"{'step':>6}"
    for k in fields:
        head += f"  {k + ' (1)':>16}  {k + ' (2)':>16}  {'rel diff':>9}"
    print(head + "  ok", file=out)
    worst = 0.0
    for step in sorted(steps_a & steps_b):
        row = f"{step:>6}"
        row_ok = True
        for k in fields:
            x, y = float(a[step][k]), float(b[step][k])
            rel = abs(x - y) / max(abs(x), abs(y), 1e-300)
            worst = max(worst, rel if not math.isnan(rel) else math.inf)
            row_ok &= close(x, y, rtol, atol)
            row += f"  {x:>16.9g}  {y:>16.9g}  {rel:>9.2e}"
        ok &= row_ok
        print(row + ("  yes" if row_ok else "  NO"), file=out)
    print(f"{'MATCH' if ok else 'MISMATCH'}: {len(steps_a & steps_b)} common steps, "
          f"worst relative difference {worst:.3e}, rtol {rtol:g}, atol {atol:g}", file=out)
    return ok


def main(argv=None):
    p = argparse.ArgumentParser(description="compare two per-step JSONL logs")
    p.add_argument("first")
    p.add_argument("second")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--atol", type=float, default=0.0)
    p.add_argument("--fields", default="loss", help="comma-separated keys to compare")
    args = p.parse_args(argv)
    fields = [f for f in args.fields.split(",") if f]
    if not fields or args.rtol < 0 or args.atol < 0:
        p.error("--fields must name at least one key; --rtol/--atol must be >= 0")
    try:
        a = read_log(args.first, fields)
        b = read_log(args.second, fields)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not a and not b:
        print("error: neither log holds any step records", file=sys.stderr)
        return 1
    return 0 if compare(a, b, fields, args.rtol, args.atol) else 1


if __name__ == "__main__":
    sys.exit(main())
