#!/usr/bin/env python3
"""How often does the CI gate call a regression? Runs `run_eval.py check --timing --baseline-rev
HEAD` N times on one problem and solution, in a scratch git repository made from this tree (the
checkout is never touched): first with the solution unchanged (every run should pass), then with
it made slower by a fixed delay a call, a share (--slower-by, 10%) of the solution's median time
in the unchanged runs (every run should fail with "slower"). Prints each run's exit code, the ratio of speedups and its
interval, the wall time, and the counts.

    python tools/gate_trials.py --problem 69 --solution fast --runs 10 --slower-by 0.10
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOWER = """

# tools/gate_trials.py: the same solution, made slower by {delay_ms:.5f} ms a call (a share of its
# own time in the unchanged runs): on CUDA a kernel that waits {cycles} cycles after its work (the
# count measured once by the trials' driver on an idle GPU, so that every process waits alike), on
# the CPU a busy wait
import time as _gate_time

import torch as _gate_torch

_Unchanged = ModelNew
_GATE_DELAY_MS = {delay_ms!r}
_GATE_DELAY_CYCLES = {cycles!r}


def _gate_delay(device):
    if device.type == "cuda":
        _gate_torch.cuda._sleep(_GATE_DELAY_CYCLES)
        return
    end = _gate_time.perf_counter() + _GATE_DELAY_MS / 1e3
    while _gate_time.perf_counter() < end:
        pass


class ModelNew(_Unchanged):
    def forward(self, *args):
        out = super().forward(*args)
        _gate_delay(out.device)
        return out
"""


CYCLES = """
import torch
if not torch.cuda.is_available():
    print(0.0)
else:
    torch.cuda._sleep(1000)
    best = float("inf")
    for _ in range(5):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(1_000_000)
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop))
    print(1_000_000 / best)
"""


def cycles_per_ms() -> float:
    """The GPU's clock cycles per millisecond of torch.cuda._sleep, the fastest of five waits (a
    wait timed while another process's work shares the GPU lasts longer), in a process of its own
    (this one holds no CUDA context through the runs); 0 without CUDA. Measured here, before any
    gate run, and written into the slower version: measured by each worker at its first call
    instead, a worker that set itself up while another's trials ran waited a quarter as long (a
    yardstick's now 2% slower where the pair's own worker was 10%: the H200, 69 / fast)."""
    proc = subprocess.run([sys.executable, "-c", CYCLES], capture_output=True, text=True, check=True)
    return float(proc.stdout.split()[-1])


def scratch_repo(where: Path) -> Path:
    repo = where / "repo"
    for name in ("harness", "problems", "solutions", "configs", "tests", "run_eval.py"):
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, repo / name)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.email=gate@trials", "-c", "user.name=gate", "commit", "-q", "-m", "baseline")
    return repo


def trial(repo: Path, args, results: Path, index: int, log: Path | None = None) -> dict:
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "run_eval.py", "check", "--problem", args.problem, "--solution",
                             args.solution, "--timing", "--baseline-rev", "HEAD", "--max-regression",
                             str(args.max_regression), "--results-dir", str(results), "--run-id", f"t{index}",
                             *[arg for setting in args.set for arg in ("--set", setting)]],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = []   # (seconds since the start, line): where a gate run's time goes, line by line
    for line in proc.stdout:
        lines.append((time.monotonic() - start, line.rstrip("\n")))
    proc.wait()
    wall = time.monotonic() - start
    if log is not None:
        log.write_text("".join(f"{t:8.2f}  {line}\n" for t, line in lines))
    output = "\n".join(line for _, line in lines)
    text = " ".join(output.split())   # the check's lines are wrapped to the terminal's width
    sides = {}   # "now" / "then": each side's result, read once
    for path in (results / f"t{index}").glob("*.json"):
        if path.name != "run.json":
            data = json.loads(path.read_text())
            sides["then" if "@" in data["solution"]["name"] else "now"] = data
    said = re.search(r"x([0-9.]+)(?: \(the rounds. median\))?, 95% CI \[([0-9.]+), ([0-9.]+)\]", text)
    if said is None:  # no change called: read the ratio from the two results
        found = {side: (data.get("timing") or {}).get("speedup") for side, data in sides.items()}
        ratio = found["now"] / found["then"] if found.get("now") and found.get("then") else None
        interval = None
    else:
        ratio, interval = float(said.group(1)), (float(said.group(2)), float(said.group(3)))
    # where a gate run's time went, per side: its pair's phases (build_s, wall_s, ...)
    phases = {side: {k: round(v, 1) for k, v in (data.get("phases") or {}).items()
                     if isinstance(v, (int, float)) and v >= 0.5} for side, data in sides.items()}
    solution_ms = (((sides.get("now") or {}).get("timing") or {}).get("solution") or {}).get("median_ms")
    return {"rc": proc.returncode, "ratio": ratio, "interval": interval, "wall_s": round(wall, 1), "phases": phases,
            "solution_ms": solution_ms,
            "slower_called": re.search(r"all of it more than [0-9]+% lower", text) is not None,
            "one_process": "in one process" in text,
            "tail": output[-1500:] if proc.returncode not in (0, 1) else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", default="69")
    parser.add_argument("--solution", default="fast")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--slower-by", type=float, default=0.10,
                        help="the slower version's delay a call, as a share of the unchanged solution's median time")
    parser.add_argument("--max-regression", type=float, default=0.05)
    parser.add_argument("--slower-ms", type=float,
                        help="the slower version's delay a call in ms (instead of --slower-by; then no unchanged "
                             "run is needed)")
    parser.add_argument("--only", choices=("unchanged", "slower"), help="run one half of the trials")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every gate run (run_eval.py's --set), e.g. timing.rounds=40")
    parser.add_argument("--json", help="write every trial here")
    parser.add_argument("--logs", help="keep each run's output here, each line with its time since the run began")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kb-gate-"))
    if args.logs:
        Path(args.logs).mkdir(parents=True, exist_ok=True)
    repo = scratch_repo(work)
    target = next((repo / "solutions").glob(f"*/{args.problem}*/{args.solution}.py"))
    report = {}
    for label in ("unchanged", "slower"):
        if args.only not in (None, label):
            report[label] = []
            continue
        if label == "slower":
            if args.slower_ms is not None:
                delay_ms, why = args.slower_ms, ""
            else:
                times = sorted(r["solution_ms"] for r in report["unchanged"] if r["solution_ms"])
                if not times:
                    sys.exit("gate_trials: no unchanged run timed the solution; nothing to make slower")
                median = times[len(times) // 2]
                delay_ms, why = args.slower_by * median, f" ({args.slower_by:.0%} of the unchanged median {median:.4f} ms)"
            cycles = max(1, int(delay_ms * cycles_per_ms()))
            print(f"slower: +{delay_ms:.5f} ms a call{why}", flush=True)
            target.write_text(target.read_text() + SLOWER.format(delay_ms=delay_ms, cycles=cycles))
        rows = []
        for i in range(args.runs):
            log = Path(args.logs) / f"{label}-{i + 1}.log" if args.logs else None
            row = trial(repo, args, work / f"results-{label}", i, log)
            rows.append(row)
            interval = f"[{row['interval'][0]:.3f}, {row['interval'][1]:.3f}]" if row["interval"] else "-"
            ratio = f"{row['ratio']:.3f}" if row["ratio"] else "-"
            where = " (one process)" if row["one_process"] else ""
            print(f"{label:<9} run {i + 1:>2}: exit {row['rc']}  now/then x{ratio} {interval}{where}  {row['wall_s']} s",
                  flush=True)
            for side, spent in sorted(row["phases"].items()):
                print(f"    {side}: " + ", ".join(f"{k} {v}" for k, v in spent.items()), flush=True)
            if row["tail"]:
                print(row["tail"])
        report[label] = rows
    unchanged, slower = report["unchanged"], report["slower"]
    walls = sorted(r["wall_s"] for r in unchanged + slower)
    held = sum(r["rc"] == 0 and r["interval"] is not None and r["interval"][0] <= 1.0 <= r["interval"][1]
               for r in unchanged)
    print(f"unchanged: {sum(r['rc'] == 0 for r in unchanged)} of {len(unchanged)} passed, "
          f"{held} with the interval holding 1.0; "
          f"slower: {sum(r['rc'] == 1 and r['slower_called'] for r in slower)} of {len(slower)} caught; "
          f"gate wall per run: median {walls[len(walls) // 2]} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
