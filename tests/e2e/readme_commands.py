"""The README's commands run as written.

Takes the ```sh block of README.md's "Using it" section and runs it, line by
line in one bash with `set -eo pipefail`, in a scratch directory where
`build/bin` is the tree under test and `examples/` the repository's, exactly
as a user who just ran the two setup commands would; then runs the demo
again with `bash scripts/demo.sh --no-setup`, the README's way to rerun it.
Each command must exit 0; the multi-rank run must train the same losses as
the one-rank run (the README's own comment says so).
"""

import os
import re
import subprocess

from e2e_common import Session, read_log, rel_diff

S = Session(__doc__)


def readme_block():
    with open(os.path.join(S.root, "README.md")) as f:
        text = f.read()
    section = text.split("## Using it", 1)[1]
    m = re.search(r"```sh\n(.*?)```", section, re.S)
    return [line for line in m.group(1).splitlines() if line.strip()]


def main():
    lines = readme_block()
    S.check(any("mpirun" in l for l in lines), "the README shows a multi-rank run")
    S.check(all("--oversubscribe" in l for l in lines if l.startswith("mpirun")),
            "every mpirun line of the README runs on a 2-core machine "
            "(--oversubscribe)", "\n".join(lines))
    build = os.path.dirname(os.path.dirname(S.strata))
    os.symlink(build, S.path("build"))
    os.symlink(os.path.join(S.root, "examples"), S.path("examples"))
    script = "set -eo pipefail\n" + "\n".join(
        f"echo '+ {l}' >&2\n{l}" for l in lines) + "\n"
    S.write_text("readme.sh", script)
    proc = subprocess.run(["bash", S.path("readme.sh")], cwd=S.dir,
                          capture_output=True, text=True, timeout=600)
    S.check(proc.returncode == 0, "the README's 'Using it' commands exit 0",
            proc.stdout[-3000:] + proc.stderr[-3000:])
    one, four = S.path("train.jsonl"), None
    if proc.returncode == 0:
        # The 4-rank run of the README logs nothing; rerun it with a log to
        # hold it to its comment ("same losses as the one-rank run").
        four = S.path("gpt-4.jsonl")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        r = subprocess.run(["mpirun", "--oversubscribe", "-np", "4", "./gpt-4",
                            "--steps", "100", "--log", four], cwd=S.dir, env=env,
                           capture_output=True, text=True, timeout=300)
        S.check(r.returncode == 0, "the 4-rank binary trains with a log",
                r.stderr[-2000:])
        if r.returncode == 0:
            a, b = read_log(one), read_log(four)
            worst = max(rel_diff(x["loss"], y["loss"]) for x, y in zip(a, b))
            S.check(len(a) == len(b) == 100 and worst < 1e-4,
                    f"tp=2 pp=2 on 4 ranks: the one-rank losses "
                    f"(worst relative difference {worst:.1e})")

    env = dict(os.environ, BUILD_DIR=build, STEPS="20")
    r = subprocess.run(["bash", "scripts/demo.sh", "--no-setup"], cwd=S.root,
                       env=env, capture_output=True, text=True, timeout=600)
    S.check(r.returncode == 0 and "step 20/20" in r.stderr,
            "bash scripts/demo.sh --no-setup reruns the demo on the built tree",
            r.stdout[-2000:] + r.stderr[-2000:])
    S.finish()


if __name__ == "__main__":
    main()
