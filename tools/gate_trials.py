#!/usr/bin/env python3
"""How often does the CI gate call a regression? Runs `run_eval.py check --timing --baseline-rev
HEAD` N times on one problem and solution, in a scratch git repository made from this tree (the
checkout is never touched): first with the solution unchanged (every run should pass), then with
it made slower by one extra in-place pass (x * 1.0, values unchanged) over a share of its output
(every run should fail with "slower"). Prints each run's exit code, the ratio of speedups and its
interval, the wall time, and the counts.

    python tools/gate_trials.py --problem 69 --solution fast --runs 10 --share 0.25
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOWER = """

# tools/gate_trials.py: the same solution, slower by one more pass over a share of its output
_Unchanged = ModelNew


class ModelNew(_Unchanged):
    def forward(self, *args):
        out = super().forward(*args)
        flat = out.view(-1)
        flat[: int(flat.numel() * {share})].mul_(1.0)
        return out
"""


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


def trial(repo: Path, args, results: Path, index: int) -> dict:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "run_eval.py", "check", "--problem", args.problem, "--solution",
                           args.solution, "--timing", "--baseline-rev", "HEAD", "--max-regression",
                           str(args.max_regression), "--results-dir", str(results), "--run-id", f"t{index}"],
                          cwd=repo, capture_output=True, text=True)
    wall = time.monotonic() - start
    text = " ".join(proc.stdout.split())   # the check's lines are wrapped to the terminal's width
    said = re.search(r"x([0-9.]+), 95% CI \[([0-9.]+), ([0-9.]+)\]", text)
    if said is None:  # no change called: read the ratio from the two results
        found = {}
        for path in (results / f"t{index}").glob("*.json"):
            if path.name != "run.json":
                data = json.loads(path.read_text())
                found["then" if "@" in data["solution"]["name"] else "now"] = (data.get("timing") or {}).get("speedup")
        ratio = found["now"] / found["then"] if found.get("now") and found.get("then") else None
        interval = None
    else:
        ratio, interval = float(said.group(1)), (float(said.group(2)), float(said.group(3)))
    phases = {}   # where a gate run's time went, per side: its pair's phases (build_s, wall_s, ...)
    for path in (results / f"t{index}").glob("*.json"):
        if path.name != "run.json":
            data = json.loads(path.read_text())
            side = "then" if "@" in data["solution"]["name"] else "now"
            phases[side] = {k: round(v, 1) for k, v in (data.get("phases") or {}).items()
                            if isinstance(v, (int, float)) and v >= 0.5}
    return {"rc": proc.returncode, "ratio": ratio, "interval": interval, "wall_s": round(wall, 1), "phases": phases,
            "slower_called": re.search(r"all of it more than [0-9]+% lower", text) is not None,
            "tail": proc.stdout[-1500:] if proc.returncode not in (0, 1) else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", default="69")
    parser.add_argument("--solution", default="fast")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--share", type=float, default=0.25, help="share of the output the extra pass touches")
    parser.add_argument("--max-regression", type=float, default=0.05)
    parser.add_argument("--json", help="write every trial here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kb-gate-"))
    repo = scratch_repo(work)
    target = next((repo / "solutions").glob(f"*/{args.problem}*/{args.solution}.py"))
    report = {}
    for label in ("unchanged", "slower"):
        if label == "slower":
            target.write_text(target.read_text() + SLOWER.format(share=args.share))
        rows = []
        for i in range(args.runs):
            row = trial(repo, args, work / f"results-{label}", i)
            rows.append(row)
            interval = f"[{row['interval'][0]:.3f}, {row['interval'][1]:.3f}]" if row["interval"] else "-"
            ratio = f"{row['ratio']:.3f}" if row["ratio"] else "-"
            print(f"{label:<9} run {i + 1:>2}: exit {row['rc']}  now/then x{ratio} {interval}  {row['wall_s']} s",
                  flush=True)
            for side, spent in sorted(row["phases"].items()):
                print(f"    {side}: " + ", ".join(f"{k} {v}" for k, v in spent.items()), flush=True)
            if row["tail"]:
                print(row["tail"])
        report[label] = rows
    unchanged, slower = report["unchanged"], report["slower"]
    print(f"unchanged: {sum(r['rc'] == 0 for r in unchanged)} of {len(unchanged)} passed; "
          f"slower: {sum(r['rc'] == 1 and r['slower_called'] for r in slower)} of {len(slower)} caught; "
          f"gate wall per run: median {sorted(r['wall_s'] for r in unchanged + slower)[len(unchanged + slower) // 2]} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
