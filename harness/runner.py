"""Pick the pairs, build them in parallel, evaluate them one at a time (the device is timed
idle), stream each result to the store as soon as it exists, and show progress."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

from . import REPO_ROOT, problems
from .build import default_cache_dir
from .config import Config
from .env import git_info
from .errors import BadInput
from .isolation import child_env
from .leaderboard import summary
from .pipeline import PairRun, RunContext
from .results import EvalResult, with_store_time
from .solutions import Pair
from .store import Store


def probe_device(requested: str) -> dict:
    """Ask a child process which device to use (the parent never initializes CUDA)."""
    out = subprocess.run([sys.executable, "-m", "harness.env", requested], capture_output=True, text=True,
                         cwd=REPO_ROOT, env=child_env(), timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"device probe failed: {out.stderr.strip()[-500:]}")
    info = json.loads(out.stdout.strip().splitlines()[-1])
    if requested == "cuda" and not info["has_cuda"]:
        raise BadInput("--device", "cuda was requested but this machine has no usable CUDA device")
    return info


def _describe(result: EvalResult) -> str:
    t = result.timing or {}
    parts = [result.status.value]
    if "speedup" in t:
        base = t[t["baseline"]]
        parts.append(f"{t['solution']['median_ms']:.3f} ms vs {base['median_ms']:.3f} ms "
                     f"{'ref' if t['baseline'] == 'reference' else 'ref (TF32 off)'} ({t['speedup']:.2f}x)")
    parts.append(result.message)
    return "  ".join(parts)


def evaluate(pairs: list[Pair], cfg: Config, *, run_id: str, resume: bool = False,
             out: Callable[[str], None] = print) -> list[EvalResult]:
    info = probe_device(cfg.device)
    device = info["device"]
    store = Store(cfg.results_dir, run_id)
    cache_dir = Path(cfg.build.cache_dir) if cfg.build.cache_dir else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    jobs = cfg.build.jobs or cores
    base_env = {"git": git_info(), "device": device, **({"gpu_name": info["gpu_name"]} if "gpu_name" in info else {})}

    done: dict[str, EvalResult] = {}
    pending: list[Pair] = []
    for pair in pairs:
        previous = store.recorded(pair) if resume else None
        if previous is not None:
            done[previous.key] = previous
        else:
            pending.append(pair)
    store.write_manifest({"run_id": run_id, "device": device, "arch": info["arch"], "config": cfg.to_dict(),
                          "config_file": cfg.source, "pairs": [f"{p.problem.id}__{p.solution.name}" for p in pairs],
                          "git": base_env["git"]})
    if done:
        out(f"resuming {run_id}: {len(done)} pair(s) already recorded, {len(pending)} to run")

    secret = cfg.secret_seed if cfg.secret_seed >= 0 else secrets.randbits(31)
    extra = {p.problem.id: problems.extra_shapes_for(p.problem, cfg.correctness.extra_shapes, cfg.source)
             for p in pairs}
    store.write_manifest({"secret_seed": secret})
    total = len(pairs)
    with tempfile.TemporaryDirectory(prefix="kb-harness-") as work:
        workers = max(1, min(jobs, len(pending)))
        ctx = RunContext(run_id=run_id, cfg=cfg, device=device, arch=info["arch"], cache_dir=cache_dir,
                         work_root=Path(work), secret=secret, build_threads=max(1, cores // workers),
                         env=base_env, extra_shapes=extra)
        runs = {id(p): PairRun(ctx, p) for p in pending}

        def record(result: EvalResult) -> None:
            start = time.monotonic()  # storing costs what serializing costs: measured on a dry run
            json.dumps(result.to_dict(), indent=1, default=str)
            result = with_store_time(result, time.monotonic() - start)
            store.write(result)
            done[result.key] = result
            out(f"[{len(done)}/{total}] {result.problem['id']} / {result.solution['name']}: {_describe(result)}")

        if pending:
            out(f"building {len(pending)} solution(s) with {workers} worker(s) on {device}"
                + (f" ({info.get('gpu_name')})" if device == "cuda" else ""))
        survivors: list[Pair] = []
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(runs[id(p)].run_build): p for p in pending}
            for future in as_completed(futures):
                result = future.result()
                if result is not None:
                    record(result)
                else:
                    survivors.append(futures[future])
        order = {id(p): i for i, p in enumerate(pending)}
        for pair in sorted(survivors, key=lambda p: order[id(p)]):
            record(runs[id(pair)].run_eval())
    results = [done[k] for k in sorted(done)]
    store.write_manifest({"summary": summary(results)})
    return results


def compile_solutions(files: list[Path], cfg: Config, *, arch: str = "9.0", jobs: int | None = None,
                      out: Callable[[str], None] = print) -> list[dict]:
    """Compile-only: import each solution in a worker whose load_inline compiles the object files
    (CUDA with nvcc, C++ with the host compiler) and loads nothing. No GPU is needed or used.
    Each item: {"path", "status", "message", "detail", "extensions"}."""
    from .compile_only import cuda_home
    from .isolation import run_module
    from .pipeline import _failure
    cache_dir = Path(cfg.build.cache_dir) if cfg.build.cache_dir else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    workers = max(1, min(jobs or cfg.build.jobs or cores, len(files) or 1))
    env = {"CUDA_VISIBLE_DEVICES": "", "TORCH_CUDA_ARCH_LIST": arch,
           "MAX_JOBS": str(max(1, cores // workers))}
    if cuda_home():
        env["CUDA_HOME"] = cuda_home()

    def one(path: Path) -> dict:
        request = {"mode": "compile", "solution_path": str(Path(path).resolve()), "device": "cpu", "arch": arch,
                   "cache_dir": str(cache_dir)}
        with tempfile.TemporaryDirectory(prefix="kb-compile-") as work:
            outcome = run_module("harness.worker", request, Path(work), limit_s=cfg.timeouts.run_s,
                                 phase_limits={"build": cfg.timeouts.build_s}, env=env)
        failure = _failure(outcome, "(timeouts.build_s)" if outcome.phase == "build" else "(timeouts.run_s)")
        builds = outcome.all("build")
        item = {"path": problems._display(Path(path)), "extensions": [b.get("name") for b in builds]}
        if failure:
            status, message, detail, _ = failure
            item.update(status=status.value, message=message, detail=detail)
        else:
            names = ", ".join(item["extensions"]) or "no load_inline call"
            item.update(status="ok", message=f"compiled ({names})", detail="")
        out(f"{item['path']}: {item['status']}: {item['message']}")
        return item

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, files))
    return results
