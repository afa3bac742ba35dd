"""load_inline under a content-hash build directory, with the full compiler log kept.

`install_hook` replaces torch.utils.cpp_extension.load_inline in the worker process (before the
solution is imported) with a wrapper that:
  * keys the build directory by a hash of (sources, functions, flags, torch version, CUDA arch),
    so identical sources build once and two solutions that share an extension name never collide;
  * reports CUDA sources as needing a CUDA device when there is none (the pair is skipped);
  * captures everything the compiler prints into <build dir>/harness_build.log;
  * raises BuildError (log, first error lines) when compiling or linking fails.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

LOG_NAME = "harness_build.log"


class BuildError(Exception):
    def __init__(self, name: str, log: str, build_dir: str):
        self.name = name
        self.log = log
        self.build_dir = build_dir
        super().__init__(f"building extension '{name}' failed: {first_errors(log) or 'see the build log'}")


class NeedsCuda(Exception):
    """The solution needs a CUDA device and this run has none: the pair is skipped."""


def default_cache_dir() -> Path:
    env = os.environ.get("KB_BUILD_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kb-harness" / "builds"


_ERROR_RE = re.compile(r"(\berror\b\s*:|\berror\b\s+#?[A-Z]?\d+|undefined reference|undefined symbol|fatal error)", re.IGNORECASE)
_NOISE = ("FAILED:", "ninja:", "RuntimeError: Error building", "subprocess.CalledProcessError")


def first_errors(log: str, limit: int = 3) -> str:
    """The first compiler/linker error lines of a build log, joined with ' | '."""
    found: list[str] = []
    for line in log.splitlines():
        s = line.strip()
        if s and not s.startswith(_NOISE) and _ERROR_RE.search(s):
            found.append(s)
            if len(found) >= limit:
                break
    return " | ".join(found)


def build_key(bound: dict[str, Any], torch_version: str, arch: str) -> str:
    relevant = {k: v for k, v in bound.items() if k not in ("build_directory", "verbose")}
    blob = json.dumps({"args": relevant, "torch": torch_version, "arch": arch}, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


@contextlib.contextmanager
def _capture_fds(path: Path):
    """Send this process's (and its children's) stdout and stderr to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def install_hook(cache_root: Path, arch: str, has_cuda: bool, on_build: Callable[[dict], None]) -> None:
    import torch
    import torch.utils.cpp_extension as cpp_ext

    original = cpp_ext.load_inline
    signature = inspect.signature(original)

    def load_inline(*args: Any, **kwargs: Any):
        bound = signature.bind(*args, **kwargs)  # TypeError (e.g. cpp_sources missing) propagates
        bound.apply_defaults()
        params = dict(bound.arguments)
        name = params["name"]
        if params.get("cuda_sources") and not has_cuda:
            raise NeedsCuda(f"extension '{name}' has CUDA sources and this run has no CUDA device")
        key = build_key(params, torch.__version__, arch)
        build_dir = Path(cache_root) / f"{name}-{key[:16]}"
        build_dir.mkdir(parents=True, exist_ok=True)
        log_path = build_dir / LOG_NAME
        was_built = any(build_dir.glob(f"{name}*.so")) and log_path.exists()
        previous_log = log_path.read_text(errors="replace") if was_built else ""
        params["build_directory"] = str(build_dir)
        params["verbose"] = True
        start = time.monotonic()
        info = {"name": name, "dir": str(build_dir), "key": key, "cached": was_built}
        on_build({**info, "event": "build_start"})
        fresh_log = build_dir / "harness_build.current.log"
        try:
            with _capture_fds(fresh_log):
                module = original(**params)
        except Exception as exc:
            log = fresh_log.read_text(errors="replace")
            if str(exc) and str(exc) not in log:
                log += f"\n{type(exc).__name__}: {exc}\n"
            on_build({**info, "event": "build_end", "ok": False, "seconds": time.monotonic() - start, "log": log})
            if "Error building extension" in str(exc) or isinstance(exc, (OSError, ImportError)) and "undefined symbol" in str(exc):
                raise BuildError(name, log, str(build_dir)) from None
            raise
        log = fresh_log.read_text(errors="replace")
        if was_built and "no work to do" in log:
            log = previous_log
        else:
            log_path.write_text(log)
        on_build({**info, "event": "build_end", "ok": True, "seconds": time.monotonic() - start, "log": log})
        return module

    cpp_ext.load_inline = load_inline
