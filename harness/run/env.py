"""Environment facts stored with every result: GPU, driver, CUDA, torch, cuDNN, TF32 mode,
clocks, host and harness git commit.

`python -m harness.run.env [cuda|cpu|auto]` prints the facts as JSON; the runner calls it once per
run in a subprocess so the parent process never initializes CUDA itself.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from typing import Any

from .. import REPO_ROOT


def _run(cmd: list[str], timeout: float = 10.0) -> str:
    try:
        from ..isolate.isolation import run  # the lane's children are its own (harness/isolate/isolation.py reap_strays)
        out = run(cmd, timeout=timeout, cwd=REPO_ROOT)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def git_info() -> dict[str, Any]:
    """The harness commit. A copy of the tree whose .git is missing or stale (e.g. on a lent GPU
    machine) passes it in KB_GIT_COMMIT, which then wins over what git says."""
    given = os.environ.get("KB_GIT_COMMIT")
    if given:
        return {"commit": given, "dirty": None, "source": "KB_GIT_COMMIT"}
    commit = _run(["git", "rev-parse", "HEAD"])
    if not commit:
        return {"commit": None, "dirty": None}
    dirty = bool(_run(["git", "status", "--porcelain", "--untracked-files=no"]))
    return {"commit": commit, "dirty": dirty}


def nvidia_smi() -> dict[str, Any]:
    fields = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    out = _run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
               + ([f"--id={visible}"] if visible else []))
    if not out:
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")]
    return dict(zip(["name", "driver", "sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz",
                     "power_limit_w", "temperature_c"], values))


def gpu_now() -> dict[str, Any]:
    """The GPU's temperature and clocks now (the first visible GPU), {} where unknown. The
    application clock is the one it runs kernels at (it moves only when someone sets it)."""
    fields = "temperature.gpu,clocks.sm,clocks.mem,clocks.applications.graphics"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    out = _run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
               + ([f"--id={visible}"] if visible else []), timeout=5.0)
    if not out:
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")]
    result: dict[str, Any] = {}
    for name, value in zip(["temperature_c", "sm_clock_mhz", "mem_clock_mhz", "app_sm_clock_mhz"], values):
        try:
            result[name] = float(value)
        except ValueError:
            pass
    return result


def collect(device: str) -> dict[str, Any]:
    import torch
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": device,
        "tf32": {
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        },
        "git": git_info(),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "memory_bytes": props.total_memory,
            "l2_bytes": getattr(props, "L2_cache_size", None),
            **{k: v for k, v in nvidia_smi().items() if k != "name"},
        }
    return env


def probe(requested: str) -> dict[str, Any]:
    """Resolve 'auto' to a device and report the build arch ('9.0', or 'cpu')."""
    import torch
    has_cuda = torch.cuda.is_available()
    device = ("cuda" if has_cuda else "cpu") if requested == "auto" else requested
    info: dict[str, Any] = {"has_cuda": has_cuda, "device": device, "arch": "cpu"}
    if has_cuda:
        major, minor = torch.cuda.get_device_capability(0)
        info["arch"] = f"{major}.{minor}"
        info["gpu_name"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(info["gpu_count"])]
        info["memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
    info["torch"] = torch.__version__
    return info


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1] if len(sys.argv) > 1 else "auto")))
