"""The GPU smoke test: the path CI cannot see. Run it on a GPU machine at the final commit of every
change to how solution code is loaded, isolated or run, and quote its last line.

    python tools/gpu_smoke.py [--out DIR] [--skip-pytest | --skip-pairs] [--full | --pytest-args "FILES or -k EXPR"]
                              [--deadline SECONDS] [--tests-from FILE]

1. The README's main command on a few pairs, with the default config (sandbox: auto, as a new
   user runs it), each in its own run, the runs at once: a fast solution (81 fast, its library built cold if the
   cache lacks it), the CUDA example (cuda_add), a cheat that must fail (cheat_late_thread: it
   rewrites its output after forward returned) and a fault that must be contained
   (cuda_fault_far: a write 64 GiB out of bounds, the solution's runtime_error, the run goes on).
   Every result must record the sandbox as active: Landlock, a network namespace and, where the
   harness runs as root, an unprivileged uid.
2. The GPU tests of that path (`SMOKE_TESTS`, `pytest -m gpu` over their files, with the build
   cache of step 1): the red team on a CUDA run (tests/test_sandbox.py: a forger, a checkout
   edit, killing the lane and the runner, a fork bomb, writes under /proc), the clock and check
   fixtures on CUDA (test_gpu_checks.py), checked and timed calls alike (test_timed_checks.py),
   the lanes (a hung kernel, late writes, a lane per GPU: test_gpu_lanes.py) and outputs over
   CUDA IPC (test_handoff.py), a CUDA run stopped by SIGTERM while it builds and while a lane
   judges (test_interrupt.py), the near-bound trials' confirming worker on CUDA
   (test_near_bound.py). `--full` runs every test marked `gpu` instead (the kernels'
   numerics of test_gpu.py, test_gpu_fused.py and test_gpu_precision.py, the diagnostics, the
   gate): run it where a change touches those, in parts.
3. One summary line, last; also written to DIR/gpu_smoke.txt with the logs beside it (the
   pairs' results under results/smoke-*).

Measured on an H100 at d194ab8, a fresh machine: the four pairs at once 152 s (one after another,
b06405c on an H200: 111 + 54 + 21 + 64 = 250 s), then 21 of the smoke set's 33 tests by the
deadline of 565 s; the other 12 (`--skip-pairs --tests-from`) 240 s: two calls of a lent machine;
`--full` takes several. Where a call is short, give each part a
`--deadline` inside the call's limit: a part stopped there says INCOMPLETE with what ran and
writes the tests it did not reach to DIR/gpu_smoke_rest.txt, which `--skip-pairs --tests-from`
takes in the next call; quote every part's line.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "solutions"
RESULTS = ROOT / "results"
# the GPU tests of how solution code is loaded, isolated and run (step 2 of the docstring)
SMOKE_TESTS = ["tests/test_sandbox.py", "tests/test_gpu_checks.py", "tests/test_timed_checks.py",
               "tests/test_gpu_lanes.py", "tests/test_handoff.py", "tests/test_interrupt.py",
               "tests/test_near_bound.py"]
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


def pair_command(problem: str, solution: str, run_id: str) -> list[str]:
    return [sys.executable, "run_eval.py", "--problem", problem, "--solution", solution,
            "--results-dir", str(RESULTS), "--run-id", run_id]


def _run_pair(problem: str, solution: str, run_id: str) -> tuple[subprocess.CompletedProcess, float]:
    """One pair's run (killed past 1200 s) and its seconds."""
    start = time.monotonic()
    cmd = pair_command(problem, solution, run_id)
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    except subprocess.TimeoutExpired as exc:   # its output so far comes as bytes
        out, err = (b.decode(errors="replace") if isinstance(b, bytes) else b or "" for b in (exc.stdout, exc.stderr))
        proc = subprocess.CompletedProcess(cmd, -9, out, err + "\nkilled after 1200 s\n")
    return proc, time.monotonic() - start


def run_pairs(out: Path, log) -> tuple[int, list[str]]:
    """The pairs, each in its own run of the main command, all started at once (a second run on the
    host is what a shared GPU machine sees: each run's lane claims its own CPUs and the builds keep
    off them); their logs in PAIRS' order once all have ended."""
    stamp = time.strftime('%Y%m%d-%H%M%S')
    with ThreadPoolExecutor(len(PAIRS)) as pool:
        started = [(problem, solution, wanted, run_id, pool.submit(_run_pair, problem, solution, run_id))
                   for problem, solution, wanted in PAIRS
                   for run_id in [f"smoke-{stamp}-{problem}-{Path(solution).stem}"]]
    passed, notes = 0, []
    for problem, solution, wanted, run_id, future in started:
        proc, took = future.result()
        log.write(f"$ run_eval.py --problem {problem} --solution {solution} (exit {proc.returncode}, "
                  f"{took:.0f} s)\n{proc.stdout}{proc.stderr}\n")
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


def reported(log: str) -> dict[str, str]:
    """{test id: outcome} from pytest -v's lines (what ran before a part was stopped)."""
    found = {}
    for m in re.finditer(r"^(tests/\S.*?) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)(?= |$)", log, re.M):
        found[m.group(1)] = m.group(2)
    return found


def stopped_part(log: str, collected: list[str], selection: str, deadline: float) -> tuple[str, list[str]]:
    """(its part of the summary line, the tests not reached) of a pytest run stopped at the deadline."""
    ran = reported(log)
    counts = {k: sum(1 for v in ran.values() if v == k) for k in ("PASSED", "FAILED", "SKIPPED", "ERROR")}
    rest = [t for t in collected if t not in ran]
    named = f" {selection}" if selection else ""
    return (f"pytest -m gpu{named}: {counts['PASSED']} passed, {counts['FAILED'] + counts['ERROR']} failed, "
            f"{counts['SKIPPED']} skipped, {len(rest)} not reached by the deadline ({deadline:.0f} s)"), rest


def selection(full: bool, pytest_args: str, tests_from: str) -> tuple[list[str], str]:
    """(pytest's arguments after `-m gpu`, how the summary line names them): the smoke set unless
    `--full`, `--pytest-args` or `--tests-from` says otherwise."""
    given = [t for t in Path(tests_from).read_text().splitlines() if t.strip()] if tests_from else []
    if given or pytest_args:
        named = pytest_args + (f" (the {len(given)} tests of {tests_from})" if given else "")
        return shlex.split(pytest_args) + given, named.strip()
    if full:
        return [], "(full)"
    return list(SMOKE_TESTS), f"(the smoke set: {', '.join(Path(t).stem for t in SMOKE_TESTS)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/kb-gpu-smoke")
    ap.add_argument("--skip-pytest", action="store_true")
    ap.add_argument("--skip-pairs", action="store_true", help="only the pytest part (a second part of a split run)")
    ap.add_argument("--full", action="store_true", help="every test marked gpu, not only the smoke set")
    ap.add_argument("--pytest-args", default="",
                    help="passed to pytest -m gpu in place of the smoke set, split as a shell would "
                         "(-k 'not (a or b)'); named in the line")
    ap.add_argument("--commit", default="", help="the commit to name (a copy of the tree may carry no git history)")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds from the start within which the line is written: the tests still running then are "
                         "stopped, and those not reached listed in DIR/gpu_smoke_rest.txt")
    ap.add_argument("--tests-from", default="", help="a file of test ids, one a line (a stopped part's rest)")
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
    failed_tests, incomplete = 0, False
    if not args.skip_pytest:
        chosen, named = selection(args.full, args.pytest_args, args.tests_from)
        cmd = [sys.executable, "-m", "pytest", "-v", "-m", "gpu", "-p", "no:cacheprovider", "--durations=15",
               *chosen]
        left = (args.deadline - 45 - (time.monotonic() - start)) if args.deadline else 3600
        with open(out / "gpu_smoke_pytest.log", "w") as log:
            try:
                proc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=max(left, 1))
                returncode = proc.returncode
            except subprocess.TimeoutExpired:
                returncode = None
        text = (out / "gpu_smoke_pytest.log").read_text()
        if returncode is None:
            collected = subprocess.run([*cmd[:3], "--collect-only", "-q", *cmd[4:]], cwd=ROOT, capture_output=True,
                                       text=True).stdout
            tests, rest = stopped_part(text, [t for t in collected.splitlines() if "::" in t], named, args.deadline)
            (out / "gpu_smoke_rest.txt").write_text("".join(f"{t}\n" for t in rest))
            failed_tests, incomplete = int(re.search(r"(\d+) failed", tests).group(1)), True
        else:
            tests, failed_tests = pytest_part(text, returncode, named)
    ok = (args.skip_pairs or passed == len(PAIRS)) and not failed_tests
    pairs = "pairs: not run" if args.skip_pairs else f"pairs {passed}/{len(PAIRS)} as expected, sandboxed"
    verdict = "FAIL" if not ok else "INCOMPLETE" if incomplete else "PASS"
    line = (f"gpu smoke: {verdict}; {pairs}; {tests}; "
            f"{gpu}; {commit}{dirty}; {time.monotonic() - start:.0f} s")
    for note in notes:
        print(f"  {note}")
    (out / "gpu_smoke.txt").write_text("\n".join([*notes, line]) + "\n")
    print(line)
    return 1 if not ok else 3 if incomplete else 0


if __name__ == "__main__":
    sys.exit(main())
