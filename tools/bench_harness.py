"""What the harness itself costs: run a fixed set of pairs through the real pipeline and print,
per pair, the seconds of each phase, the GPU time of its timed, warm-up and checked calls, and the
overhead (the pair's wall time minus that GPU time). The results are recorded like any run, so
`python run_eval.py report RUN --phases` re-prints the table.

    python tools/bench_harness.py                        # the fixed set (below), default config
    python tools/bench_harness.py --pairs 81:fast 57:fast --set correctness.trials=2
    python tools/bench_harness.py --device cpu           # the CPU set (elementwise_add / cpp_add)
    python tools/bench_harness.py --startup              # a warm CPU run of elementwise_add / cpp_add
                                                         # against a bare `python -c "import torch"`

Each pair is PROBLEM:SOLUTION, PROBLEM as --problem takes it (number, id, family/prefix).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import leaderboard, problems, solutions  # noqa: E402
from harness.core.config import load_config, parse_override, with_overrides  # noqa: E402
from harness.core.errors import BadInput  # noqa: E402
from harness.run.runner import evaluate  # noqa: E402
from harness.core.store import new_run_id  # noqa: E402

# The small CUDA example (1024 x 1024), three solutions of problem 81 (a 0.83 GB output, the
# family's most overhead-bound problem), and the 6.4 GB softmax.
GPU_PAIRS = ["elementwise_add:cuda_add", "81:direct", "81:fast", "81:fast_fp32", "23_softmax:online"]
CPU_PAIRS = ["elementwise_add:cpp_add"]


def resolve(spec: str) -> list:
    if ":" not in spec:
        raise BadInput("--pairs", f"'{spec}' is not PROBLEM:SOLUTION")
    problem_spec, solution = spec.split(":", 1)
    return solutions.select_pairs(problems.select(problem_spec), solution, True, problems.discover())


def startup(runs: int, results_dir: str) -> int:
    """A warm `run_eval.py --problem elementwise_add --solution cpp_add --device cpu` (with its
    sandbox, and with `--set sandbox=off`) against a bare `python -c "import torch"`, alternately,
    in this one script: medians and their ratios."""
    import statistics
    import subprocess
    root = Path(__file__).resolve().parent.parent
    commands = {"import torch": [sys.executable, "-c", "import torch"],
                "cpp_add on the CPU": [sys.executable, str(root / "run_eval.py"), "--problem", "elementwise_add",
                                       "--solution", "cpp_add", "--device", "cpu", "--results-dir", results_dir]}
    commands["cpp_add on the CPU, sandbox off"] = commands["cpp_add on the CPU"] + ["--set", "sandbox=off"]
    for warm in ("cpp_add on the CPU", "cpp_add on the CPU, sandbox off"):  # builds, writes the manifest
        subprocess.run(commands[warm], capture_output=True, cwd=root)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            start = time.monotonic()
            done = subprocess.run(command, capture_output=True, cwd=root)
            times[name].append(time.monotonic() - start)
            if done.returncode != 0:
                print(f"error: {name} exited with {done.returncode}", file=sys.stderr)
                return 1
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name}: median {medians[name]:.2f} s over {runs} runs ({', '.join(f'{x:.2f}' for x in t)})")
    for name in ("cpp_add on the CPU", "cpp_add on the CPU, sandbox off"):
        print(f"ratio, {name}: {medians[name] / medians['import torch']:.2f}x")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", nargs="+", help="PROBLEM:SOLUTION ... (default: the fixed set for the device)")
    p.add_argument("--config", default="configs/default.yaml")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"])
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--results-dir", default="results")
    p.add_argument("--run-id")
    p.add_argument("--format", choices=["text", "md", "csv"], default="md")
    p.add_argument("--startup", type=int, nargs="?", const=5, metavar="RUNS",
                   help="instead: time a warm CPU run of elementwise_add/cpp_add against `import torch`")
    args = p.parse_args(argv)
    if args.startup:
        return startup(args.startup, args.results_dir)
    try:
        cfg = load_config(args.config)
        overrides = dict(parse_override(s) for s in args.set)
        overrides["results_dir"] = args.results_dir
        if args.device:
            overrides["device"] = args.device
        cfg = with_overrides(cfg, overrides)
        default = CPU_PAIRS if cfg.device == "cpu" else GPU_PAIRS
        pairs = [pair for spec in (args.pairs or default) for pair in resolve(spec)]
        run_id = args.run_id or "bench-harness-" + new_run_id()
        start = time.monotonic()
        results = evaluate(pairs, cfg, run_id=run_id)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wall = time.monotonic() - start
    print()
    print(leaderboard.phase_table(results, args.format))
    own = sum(r.phases.get("wall_s", 0.0) for r in results)
    gpu = sum(r.phases.get("gpu_s", 0.0) for r in results)
    print(f"\nrun wall {wall:.1f} s for {len(results)} pair(s); pairs' own time {own:.1f} s, GPU {gpu:.1f} s, "
          f"overhead {own - gpu:.1f} s; results in {cfg.results_dir}/{run_id}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
