"""The GPU smoke test: the path CI cannot see. Run it on a GPU machine at the final commit of every
change to how solution code is loaded, isolated or run, and quote its last line.

    python tools/gpu_smoke.py [--out DIR] [--skip-pytest | --skip-pairs] [--pytest-args "FILES or -k EXPR"]

From a cold build cache the whole of it takes longer than one 10-minute call of a lent machine:
there, run it in two parts at the same commit (`--pytest-args` naming some of the GPU test files,
then `--skip-pairs` with the others) and quote both lines.

1. The README's main command on a few pairs, with the default config (sandbox: auto, as a new
   user runs it), each in its own run: a fast solution (81 fast, its library built cold if the
   cache lacks it), the CUDA example (cuda_add), a cheat that must fail (cheat_late_thread: it
   rewrites its output after forward returned) and a fault that must be contained
   (cuda_fault_far: a write 64 GiB out of bounds, the solution's runtime_error, the run goes on).
   Every result must record the sandbox as active: Landlock, a network namespace and, where the
   harness runs as root, an unprivileged uid.
2. `pytest -m gpu`, the red team on a CUDA run among it (tests/test_sandbox.py: a forger, a
   checkout edit, killing the lane and the runner, a fork bomb, writes under /proc), with the
   build cache of step 1.
3. One summary line, last; also written to DIR/gpu_smoke.txt with the logs beside it (the
   pairs' results under results/smoke-*).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "solutions"
RESULTS = ROOT / "results"
PAIRS = [  # (problem, solution, statuses that pass)
    ("81", "fast", {"ok"}),
    ("elementwise_add", "cuda_add", {"ok"}),
    ("elementwise_add", str(FIXTURES / "cheat_late_thread.py"), {"incorrect"}),
    ("elementwise_add", str(FIXTURES / "cuda_fault_far.py"), {"runtime_error"}),
]


def sandbox_problems(result: dict) -> list[str]:
    active = " ".join((result.get("sandbox") or {}).get("active", []))
    missing = [part for part in ("landlock-fs", "network namespace") if part not in active]
    if os.geteuid() == 0 and "unprivileged uid" not in active:
        missing.append("unprivileged uid")
    return missing


def run_pairs(out: Path, log) -> tuple[int, list[str]]:
    passed, notes = 0, []
    for problem, solution, wanted in PAIRS:
        run_id = f"smoke-{time.strftime('%Y%m%d-%H%M%S')}-{problem}-{Path(solution).stem}"
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "run_eval.py", "--problem", problem, "--solution", solution,
                               "--results-dir", str(RESULTS), "--run-id", run_id], cwd=ROOT,
                              capture_output=True, text=True, timeout=1200)
        log.write(f"$ run_eval.py --problem {problem} --solution {solution} (exit {proc.returncode}, "
                  f"{time.monotonic() - start:.0f} s)\n{proc.stdout}{proc.stderr}\n")
        files = [p for p in (RESULTS / run_id).glob("*.json") if p.name != "run.json"]
        if len(files) != 1:
            notes.append(f"{problem}/{Path(solution).stem}: {len(files)} results (exit {proc.returncode})")
            continue
        result = json.loads(files[0].read_text())
        missing = sandbox_problems(result)
        if result["status"] in wanted and not missing:
            passed += 1
        else:
            notes.append(f"{problem}/{Path(solution).stem}: {result['status']} (wanted {'/'.join(sorted(wanted))})"
                         + (f", sandbox without {', '.join(missing)}" if missing else "")
                         + f": {result['message'][:200]}")
    return passed, notes


def pytest_part(log: str, returncode: int, selection: str) -> tuple[str, int]:
    """(its part of the summary line, failures) of the GPU tests' run: pytest's last line counted;
    a selection that ran no test (none collected, or all skipped) is a failure, not a pass."""
    last = log.splitlines()[-1] if log.strip() else ""
    counts = dict((k, int(v)) for v, k in re.findall(r"(\d+) (passed|failed|errors?|skipped)", last))
    failed = (counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0) + (returncode not in (0, 5))
              + (counts.get("passed", 0) == 0))
    named = f" {selection}" if selection else ""
    return (f"pytest -m gpu{named}: {counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed, "
            f"{counts.get('skipped', 0)} skipped{'' if counts.get('passed', 0) else ' (no GPU test ran)'}"), failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/kb-gpu-smoke")
    ap.add_argument("--skip-pytest", action="store_true")
    ap.add_argument("--skip-pairs", action="store_true", help="only the pytest part (a second part of a split run)")
    ap.add_argument("--pytest-args", default="",
                    help="passed to pytest -m gpu, split as a shell would (-k 'not (a or b)'); named in the line")
    ap.add_argument("--commit", default="", help="the commit to name (a copy of the tree may carry no git history)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("KB_BUILD_CACHE", str(Path.home() / ".cache" / "kb-harness" / "builds"))
    os.environ["KB_TEST_BUILD_CACHE"] = os.environ["KB_BUILD_CACHE"]
    import torch
    if not torch.cuda.is_available():
        print("gpu smoke: FAIL: no CUDA device here")
        return 2
    gpu = torch.cuda.get_device_name(0)
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True).stdout.strip() or "no git"
    dirty = "" if args.commit else " (uncommitted changes)" if subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout.strip() else ""
    start = time.monotonic()
    passed, notes = 0, []
    if not args.skip_pairs:
        with open(out / "gpu_smoke_pairs.log", "w") as log:
            passed, notes = run_pairs(out, log)
    tests = "pytest -m gpu: not run"
    failed_tests = 0
    if not args.skip_pytest:
        with open(out / "gpu_smoke_pytest.log", "w") as log:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                                   "--durations=15", *shlex.split(args.pytest_args)], cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=3600)
        tests, failed_tests = pytest_part((out / "gpu_smoke_pytest.log").read_text(), proc.returncode, args.pytest_args)
    ok = (args.skip_pairs or passed == len(PAIRS)) and not failed_tests
    pairs = "pairs: not run" if args.skip_pairs else f"pairs {passed}/{len(PAIRS)} as expected, sandboxed"
    line = (f"gpu smoke: {'PASS' if ok else 'FAIL'}; {pairs}; {tests}; "
            f"{gpu}; {commit}{dirty}; {time.monotonic() - start:.0f} s")
    for note in notes:
        print(f"  {note}")
    (out / "gpu_smoke.txt").write_text("\n".join([*notes, line]) + "\n")
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
