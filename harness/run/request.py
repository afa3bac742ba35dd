"""What a worker is asked: the request a lane sends it for a pair (the mode, the files, the seeds,
the timing and checks config), the pair's built libraries staged where a sandboxed worker can
read them, and the limits on its calls."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..compile.build import LOG_NAME


def every_timed_call(checks: dict[str, Any], device: str) -> bool:
    """Whether every timed call is handed over alike, the lane judging a secret sample
    (checks.secret_timed_checks; on, or auto: on every device, the reference's calls in its
    reference worker made the same way, so both sides pay the same per-call cost; off: the last
    timed calls are checked, which a solution can tell apart)."""
    return checks.get("secret_timed_checks", "auto") in ("on", "auto")


def _request(job: dict[str, Any], mode: str, spare, hint_bytes: int = 0) -> dict[str, Any]:
    cfg = job["config"]
    checks = {**cfg["checks"], "every_timed_call": every_timed_call(cfg["checks"], job["device"])}
    return {"mode": mode, "problem_path": job["problem_path"], "solution_path": job["solution_path"],
            "device": job["device"], "arch": job["arch"], "cache_dir": job["cache_dir"], "seeds": job["seeds"],
            "timing": cfg["timing"], "checks": checks, "hint_bytes": hint_bytes, "env": job["worker_env"],
            "precision": cfg["precision"], "prebuilt": stage_libraries(job, spare.scratch)}


def stage_libraries(job: dict[str, Any], scratch: Path | None) -> dict[str, dict[str, str]]:
    """The libraries of the pair's build record (folders the runner published in the build cache:
    harness/compile/recipes.py) for its worker: a sandboxed worker does not reach the cache, so they are
    copied into its scratch (regular files only), with their build logs; with the sandbox off the
    worker imports them where they are. Returns build folder name -> {"copy": the folder to
    import from, "from": the cache's} (harness/compile/build.py install_hook)."""
    home = Path(job["cache_dir"]).resolve()
    staged = {}
    for ext in job.get("libraries") or []:
        folder = Path(ext.get("dir") or "")
        if not ext.get("ok") or not folder.is_dir() or not folder.resolve().is_relative_to(home):
            continue
        if scratch is None:
            staged[folder.name] = {"copy": str(folder), "from": str(folder)}
            continue
        copy = scratch / "lib" / folder.name
        copy.mkdir(parents=True, exist_ok=True)
        for library in [*folder.glob("*.so"), folder / LOG_NAME]:
            if library.is_file() and not library.is_symlink():
                shutil.copy2(library, copy / library.name)
        staged[folder.name] = {"copy": str(copy), "from": str(folder)}
    return staged


def _limits(cfg: dict[str, Any], reference_ms: float) -> dict[str, Any]:
    t = cfg["timeouts"]
    call_s = max(t["call_s"], t["call_factor"] * reference_ms / 1e3)
    return {"run_s": t["run_s"], "build_s": t["build_s"], "call_s": call_s,
            "first_call_s": max(call_s, t["first_call_s"]),
            "call_rule": f"max(timeouts.call_s={t['call_s']:g} s, timeouts.call_factor={t['call_factor']:g} x the "
                         f"reference's {reference_ms:.3g} ms; the first call of a model at least "
                         f"timeouts.first_call_s={t['first_call_s']:g} s)"}
