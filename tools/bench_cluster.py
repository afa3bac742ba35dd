"""What `--cluster ray` adds over a local run of the same pairs, on this machine: the same CPU
pairs run with `cluster: local` and `cluster: ray` alternately (builds cached by a first, untimed
run of each), and for each the run's wall time, its start (until the first lane has answered and
the problem files are checked, which on Ray includes starting a local Ray instance) and the
pairs' part (the rest), whose difference per pair is Ray's added overhead per pair.

    python tools/bench_cluster.py                    # the default CPU set, 3 runs of each
    python tools/bench_cluster.py --runs 5 --solutions tests/fixtures/solutions/cpp_ok.py ...
    python tools/bench_cluster.py --address auto     # against a running cluster instead
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.core.config import load_config, with_overrides  # noqa: E402
from harness.core.errors import BadInput  # noqa: E402
from harness.core.problems import problem_from_path  # noqa: E402
from harness.run.runner import evaluate  # noqa: E402
from harness.core.solutions import Pair, solution_from_path  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "solutions"
# elementwise_add solutions of every kind that ends quickly: correct, wrong, crashing, cheating
DEFAULT = [ROOT / "solutions" / "examples" / "elementwise_add" / "cpp_add.py"] + [
    FIXTURES / f"{name}.py" for name in ("cpp_ok", "cpp_wrong", "cpp_tf32", "cpp_type_dispatch", "cpp_out_by_value",
                                         "cpp_segv", "cheat_zeros", "cheat_mutate_input", "cheat_inplace_alias",
                                         "cheat_empty", "import_raises")]


def one_run(pairs: list[Pair], cfg, run_id: str) -> tuple[float, float, list]:
    """(run wall, start) in seconds, and the results."""
    marks: list[float] = []

    def out(line: str) -> None:
        if " pair(s) on " in line and not marks:  # printed once the lanes are up and the problems checked
            marks.append(time.monotonic())

    start = time.monotonic()
    results = evaluate(pairs, cfg, run_id=run_id, out=out)
    wall = time.monotonic() - start
    return wall, (marks[0] - start) if marks else float("nan"), results


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problem", default=str(ROOT / "problems" / "examples" / "elementwise_add.py"))
    p.add_argument("--solutions", nargs="+", default=[str(s) for s in DEFAULT])
    p.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--address", default="", help="ray.address ('' starts a local instance)")
    args = p.parse_args(argv)
    try:
        problem = problem_from_path(Path(args.problem))
        pairs = [Pair(problem, solution_from_path(Path(s))) for s in args.solutions]
        results_dir = tempfile.mkdtemp(prefix="kb-bench-cluster-")
        base = with_overrides(load_config(args.config), {"device": "cpu", "results_dir": results_dir,
                                                        "secret_seed": 7, "ray.address": args.address})
        modes = {m: with_overrides(base, {"cluster": m}) for m in ("local", "ray")}
        verdicts = {}
        for mode, cfg in modes.items():  # builds (and Ray's archives) cached; not timed
            verdicts[mode] = sorted((r.solution["name"], r.status.value) for r in one_run(pairs, cfg, f"warm-{mode}")[2])
        if verdicts["local"] != verdicts["ray"]:
            print(f"error: the verdicts differ: local {verdicts['local']}, ray {verdicts['ray']}", file=sys.stderr)
            return 1
        times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
        for k in range(args.runs):
            for mode, cfg in modes.items():
                wall, start, _ = one_run(pairs, cfg, f"{mode}-{k}")
                times[mode].append((wall, start))
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n = len(pairs)
    print(f"{n} pairs of {problem.id} on the CPU, {args.runs} runs of each mode, alternating; results in {results_dir}")
    print("| mode | run wall s (median) | start s | pairs' part s | per pair s | runs (wall) |")
    print("|---|---|---|---|---|---|")
    medians = {}
    for mode, got in times.items():
        wall = statistics.median(w for w, _ in got)
        start = statistics.median(s for _, s in got)
        part = statistics.median(w - s for w, s in got)
        medians[mode] = (wall, start, part)
        print(f"| {mode} | {wall:.2f} | {start:.2f} | {part:.2f} | {part / n:.3f} | "
              f"{', '.join(f'{w:.2f}' for w, _ in got)} |")
    (lw, ls, lp), (rw, rs, rp) = medians["local"], medians["ray"]
    print(f"\nRay adds {(rp - lp) / n:+.3f} s per pair (pairs' part), {rs - ls:+.2f} s once per run (start), "
          f"{rw - lw:+.2f} s in all ({(rw - lw) / n:+.3f} s per pair with the start spread over {n} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
