"""The build cache's trusted side: recipes compiled and published by the runner.

A build step runs a solution's module and records each load_inline call as a recipe
(harness/compile/build.py); it compiles nothing, and nothing it writes is ever used by another process.
For each recipe, `Compiles.get` gives the folder of the build cache that holds its library:
  - there already: a folder named by the recipe's key that an earlier compile step published;
  - else: a compile step (harness/compile/compiler.py, sandboxed like the build step, running the
    compiler and no solution code) builds it in its own scratch, and the runner publishes it:
    the regular files of the folder named by the key the runner computed itself from the recipe,
    copied into the cache through a temporary folder and renamed. Symbolic links, devices and
    anything else are left behind, and nothing the step says about its output is taken as given.
So a library in the cache is always what its recipe compiles to, whoever asked first; a solution
that records another's exact sources gets that solution's library, and can plant nothing for it.
Identical recipes in one run compile once: the first pair asks, the others wait for it (a failure
is not shared: each pair's own compile step then names its own file).
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..isolate import sandbox
from .build import LOG_NAME, folder_of
from .failures import failure
from .pch import GCH, header_for
from ..isolate.isolation import run_module
from ..core.results import Status

COMPILE_ONLY = "compile-only"   # the cache's folder of compile-only objects (the CI gate's check)


def home_of(cache_dir: Path, compile_only: bool) -> Path:
    return Path(cache_dir) / COMPILE_ONLY if compile_only else Path(cache_dir)


def published(folder: Path, compile_only: bool) -> bool:
    """Whether a cache folder holds a published build (its log; a library unless compile-only)."""
    if not (folder / LOG_NAME).is_file():
        return False
    return compile_only or any(p.is_file() and not p.is_symlink() for p in folder.glob("*.so"))


def _copy_regular(source: Path, target: Path) -> None:
    """Copy one regular file, never following a link (O_NOFOLLOW, fstat after opening)."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        with os.fdopen(fd, "rb", closefd=False) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.chmod(target, 0o755 if target.suffix == ".so" else 0o644)
    finally:
        os.close(fd)


def publish(built: Path, target: Path) -> None:
    """The regular files of `built` (a compile step's folder) as the cache folder `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for root, dirs, files in os.walk(built, followlinks=False):
            here = staging / Path(root).relative_to(built)
            here.mkdir(parents=True, exist_ok=True)
            dirs[:] = [d for d in dirs if not Path(root, d).is_symlink()]
            for name in files:
                try:
                    _copy_regular(Path(root, name), here / name)
                except OSError:
                    continue
        os.chmod(staging, 0o755)
        os.rename(staging, target)
    except OSError:  # an identical build landed first
        shutil.rmtree(staging, ignore_errors=True)


@dataclass
class Compiled:
    """A recipe's outcome: its entry in the pair's build record, and what failed (else None)."""
    ext: dict[str, Any]
    failed: tuple | None = None
    log: str = ""
    sandbox: dict[str, Any] = field(default_factory=dict)


def reachable_header(pch: str | None, why: str, policy: dict[str, Any]) -> tuple[str | None, str]:
    """The precompiled header's folder where the build step's identity can reach it; else none, and
    why. It lives in the build cache, whose way may be closed to the step's uid (a root harness with
    the cache under a 0700 /root): main.cpp's compile would fail on its -I (Permission denied), a
    correct solution's build_error (the H200 corpus run with build.pch: on). `policy` loses it."""
    if not pch or policy.get("uid") is None:
        return pch, why
    closed = sandbox.closed_folder(Path(pch) / GCH)
    if not closed:
        return pch, why
    policy["readable"] = [p for p in policy["readable"] if p != str(Path(pch).resolve())]
    return None, f"not reachable by the build's uid: {closed}"


@dataclass
class Compiler:
    """What a compile step needs from its run (plain data: it crosses to Ray's build tasks)."""
    cache_dir: Path
    torch_version: str
    arch: str
    plan: dict[str, Any]                 # sandbox.Plan.to_dict()
    hidden: list[str]                    # what no sandboxed process reads (the results, work folders, the cache)
    env: dict[str, str]                  # MAX_JOBS, TORCH_CUDA_ARCH_LIST, ...
    limit_s: float                       # timeouts.build_s
    pch: bool = False                    # main.cpp may read a precompiled torch/extension.h (harness/compile/pch.py)
    cu_header: str = "off"               # the headers cuda.cu is compiled with in turn (compiler.py HEADER_RUNGS)
    start: str = "exec"                  # how the step starts (isolation.run_module: exec | fork; build.start)
    keep_nice: bool = False              # the compilers keep the build thread's nice (build.stagger), else 10 more
    main_header: str = "full"            # main.cpp's torch/extension.h: full | lean (compiler.py, build.main_header)

    def folder(self, recipe: dict[str, Any]) -> Path:
        """The recipe's cache folder, from its own arguments (not from what the build step said)."""
        compile_only = bool(recipe.get("compile_only"))
        return home_of(self.cache_dir, compile_only) / folder_of(recipe["params"], self.torch_version, self.arch,
                                                                compile_only)

    def run(self, recipe: dict[str, Any], where: Path) -> Compiled:
        """Compile `recipe` in a fresh step under `where`, publish it; or say why it failed."""
        compile_only = bool(recipe.get("compile_only"))
        target = self.folder(recipe)
        name = recipe["params"]["name"]
        scratch = where / "scratch"
        build_root = scratch / "builds" if self.plan["mode"] != "off" else where / "builds"
        pch, pch_why = header_for(Path(self.cache_dir) / "pch", recipe["params"], self.env,
                                  self.main_header == "lean", self.start) if self.pch else (None, "")
        policy = None
        if self.plan["mode"] != "off":
            policy = sandbox.policy(self.plan, "cpu", scratch=scratch, hidden=self.hidden, readable=[pch] if pch else [])
            pch, pch_why = reachable_header(pch, pch_why, policy)
        request = {"recipe": recipe, "build_root": str(build_root), "compile_only": compile_only, "arch": self.arch,
                   "pch": pch, "cu_header": self.cu_header, "keep_nice": self.keep_nice, "main_header": self.main_header}
        outcome = run_module("harness.compile.compiler", request, where, limit_s=self.limit_s,
                             phase_limits={"build": self.limit_s},
                             env={**self.env, "CUDA_VISIBLE_DEVICES": "", "TORCH_CUDA_ARCH_LIST": self.arch},
                             policy=policy, start=self.start)
        ran_in = {k: v for k, v in (outcome.last("sandbox") or {}).items() if k in ("mode", "active", "notes")}
        end = outcome.last("build_end") or {}
        ext = {"name": name, "key": end.get("key"), "dir": None, "cached": False, "ok": False,
               "seconds": round(float(end.get("seconds") or outcome.wall_s), 3),
               **({"cpu_s": round(float(end["cpu_s"]), 3)} if end.get("cpu_s") is not None else {}),
               **({"pch": pch_why} if pch_why else {}), **({"cu_header": end["cu_header"]} if end.get("cu_header") else {}),
               **({"main_header": end["main_header"]} if end.get("main_header") else {}),
               **({"nice": end["nice"]} if end.get("nice") is not None else {}),
               **({"jobs": int(self.env["MAX_JOBS"])} if str(self.env.get("MAX_JOBS", "")).isdigit() else {})}
        failed = failure(outcome, "(timeouts.build_s)")
        built = build_root / target.name
        if failed is None and not published(built, compile_only):
            failed = (Status.BUILD_ERROR, f"building extension '{name}': the compile step ended without its "
                                          f"library", outcome.log_tail, "build")
        if failed is None:
            publish(built, target)
            if not published(target, compile_only):
                failed = (Status.HARNESS_ERROR, f"the build of extension '{name}' could not be published in the "
                                                f"build cache ({target})", "", "build")
        if failed is None:
            ext.update(dir=str(target), ok=True)
        shutil.rmtree(build_root, ignore_errors=True)
        return Compiled(ext, failed, end.get("log", ""), ran_in)

    def cached(self, recipe: dict[str, Any]) -> Compiled | None:
        target = self.folder(recipe)
        if not published(target, bool(recipe.get("compile_only"))):
            return None
        log = (target / LOG_NAME).read_text(errors="replace")
        return Compiled({"name": recipe["params"]["name"], "key": recipe.get("key"), "dir": str(target),
                         "cached": True, "ok": True, "seconds": 0.0}, None, log)


class Compiles:
    """A run's compile steps, one per recipe folder; pickled empty (a Ray build task has its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, Future] = {}

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def get(self, compiler: Compiler, recipe: dict[str, Any], where: Callable[[], Path]) -> Compiled:
        """The recipe's published folder: cached, compiled by an earlier pair of the run, or now in
        a step under `where()`."""
        found = compiler.cached(recipe)
        if found is not None:
            return found
        key = str(compiler.folder(recipe))
        with self._lock:
            future = self._running.get(key)
            owner = future is None
            if owner:
                future = self._running[key] = Future()
        if owner:
            try:
                future.set_result(compiler.run(recipe, where()))
            except BaseException as exc:  # noqa: BLE001 - the waiting pairs learn of it too
                future.set_exception(exc)
        result = future.result()
        if result.failed is None:
            return result if owner else Compiled({**result.ext, "cached": True, "seconds": 0.0}, None, result.log,
                                                 result.sandbox)
        return result if owner else compiler.run(recipe, where())
