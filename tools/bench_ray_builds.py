"""Builds per hour on a Ray cluster against the number of build workers (issue 76): a local
multi-node Ray cluster on this machine (ray.cluster_utils.Cluster: a head node of one CPU that holds
the CPU lane, and K nodes of one CPU each for the builds, every node a raylet of its own), the
main command's pipeline with `cluster: ray` over N distinct C++ recipes (the elementwise_add
example with a constant that differs, so each one builds), a fresh build cache for every K.

    python tools/bench_ray_builds.py [--workers 1,2] [--recipes 8] [--config FILE] [--local]

For each K: the run's wall, its start (Ray and the lane up), the builds' part (from then until the
last build is back at the driver; the one lane judges the pairs meanwhile and after, which the
run's wall includes), a recipe's build and CPU seconds (median), and builds per hour (N over the
builds' part). Nodes
on one host share its cores: past the host's core count K measures contention, not a cluster.
"""
from __future__ import annotations

import argparse
import os
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
from harness.core.solutions import Pair, solution_from_path  # noqa: E402

EXAMPLE = ROOT / "solutions" / "examples" / "elementwise_add" / "cpp_add.py"
PROBLEM = ROOT / "problems" / "examples" / "elementwise_add.py"


def recipes(folder: Path, n: int, tag: str) -> list[Path]:
    """n solutions whose C++ differs by one constant (each its own build); names differ by run."""
    text = EXAMPLE.read_text()
    anchor = "po[i] = pa[i] + pb[i];"
    if anchor not in text:
        raise BadInput(str(EXAMPLE), f"the benchmark's anchor {anchor!r} is no longer in the example")
    paths = []
    for i in range(n):
        path = folder / f"add_{tag}_{i}.py"
        path.write_text(text.replace(anchor, f"po[i] = pa[i] + pb[i] + 0.0f * {i}.0f;  // {tag}")
                        .replace('name="elementwise_add_cpp"', f'name="elementwise_add_cpp_{tag}_{i}"'))
        paths.append(path)
    return paths


def one_k(k: int, n: int, config: str, work: Path, mode: str) -> dict:
    """One run: on a local Ray cluster of k build nodes (mode "ray"), or on this host alone with k
    build jobs (mode "local", the same pipeline without Ray)."""
    import ray
    from ray.cluster_utils import Cluster
    from harness.run.progress import Progress
    from harness.run.runner import evaluate
    cluster = None
    if mode == "ray":
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        for _ in range(k):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
    folder = work / f"{mode}{k}"
    folder.mkdir()
    problem = problem_from_path(PROBLEM)
    pairs = [Pair(problem, solution_from_path(p)) for p in recipes(folder, n, f"{mode}{k}")]
    where = {"cluster": "ray", "ray.address": cluster.address} if cluster else {"cluster": "local", "build.jobs": k}
    cfg = with_overrides(load_config(config), {"device": "cpu", **where, "results_dir": str(folder / "results"),
                                               "build.cache_dir": str(folder / "cache"), "secret_seed": 7})
    marks: list[float] = []
    built: list[float] = []

    def out(line: str) -> None:
        if " pair(s) on " in line and not marks:
            marks.append(time.monotonic())
    done = Progress.build_done

    def build_done(self) -> None:          # when each build came back to the driver
        built.append(time.monotonic())
        done(self)
    Progress.build_done = build_done
    start = time.monotonic()
    try:
        results = evaluate(pairs, cfg, run_id=f"{mode}{k}", out=out)
    finally:
        wall = time.monotonic() - start
        Progress.build_done = done
        if cluster:
            ray.shutdown()
            cluster.shutdown()
    begun = (marks[0] - start) if marks else 0.0
    exts = [e for r in results for e in (r.build or {}).get("extensions", [])]
    return {"mode": mode, "k": k, "n": n, "wall": wall, "start": begun, "part": (max(built) - start - begun) if built else wall,
            "statuses": sorted({r.status.value for r in results}),
            "built": sum(1 for e in exts if e.get("ok") and not e.get("cached")),
            "cpu_s": statistics.median([e["cpu_s"] for e in exts if e.get("cpu_s")] or [0.0]),
            "build_s": statistics.median([e["seconds"] for e in exts if e.get("seconds")] or [0.0])}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2", help="the numbers of build nodes to measure, in order")
    ap.add_argument("--recipes", type=int, default=8)
    ap.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    ap.add_argument("--local", action="store_true", help="also each K as build jobs of a local run (no Ray)")
    args = ap.parse_args(argv)
    try:
        ks = [int(x) for x in args.workers.split(",") if x]
        if not ks or min(ks) < 1 or args.recipes < 1:
            raise ValueError
    except ValueError:
        print(f"bench_ray_builds: --workers {args.workers!r} --recipes {args.recipes}: expected numbers of 1 or more",
              file=sys.stderr)
        return 2
    try:
        import ray  # noqa: F401
    except ImportError:
        print("bench_ray_builds: needs Ray (pip install -r requirements-ray.txt)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="kb-ray-builds-") as tmp:
        for k in ks:
            for mode in ("ray", "local") if args.local else ("ray",):
                try:
                    rows.append(one_k(k, args.recipes, args.config, Path(tmp), mode))
                except BadInput as exc:
                    print(f"bench_ray_builds: {exc}", file=sys.stderr)
                    return 2
                r = rows[-1]
                print(f"{mode} k={k}: {r['built']} built of {r['n']}, {r['statuses']}, wall {r['wall']:.1f} s", flush=True)
    print(f"\n{args.recipes} C++ recipes (elementwise_add, one constant apart), a fresh build cache each; "
          f"{os.cpu_count()} cores on this host")
    print("| where | builders |  run wall s | start s | builds' part s | recipe build s (median) | recipe CPU-s (median) "
          "| builds / hour |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        where = "Ray, nodes of 1 CPU" if r["mode"] == "ray" else "one host, build.jobs"
        print(f"| {where} | {r['k']} | {r['wall']:.1f} | {r['start']:.1f} | {r['part']:.1f} | {r['build_s']:.1f} | "
              f"{r['cpu_s']:.1f} | {3600 * r['n'] / r['part']:.0f} |")
    return 0 if all(r["built"] == r["n"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
