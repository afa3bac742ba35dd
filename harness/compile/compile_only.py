"""Compile-only builds: compile a solution's load_inline sources against the torch headers with
torch's own generated files and ninja rules, but do not link or load them. Used where nvcc
exists and no GPU does (CI), through the worker's "compile" mode.

A CPU-only torch wheel lacks some headers that CUDA code includes (c10/cuda/impl/
cuda_cmake_macros.h, and through ATen/cuda/CUDAContext.h the cuBLAS/cuSPARSE/cuSOLVER headers
when the CUDA toolkit has no math libraries). For each such header that is really missing, a
stub declaring only the types torch's headers use is put on the include path; a header that
exists is never shadowed. Code that calls cuBLAS & co. itself cannot be checked this way.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import types
from pathlib import Path

from .build import cuda_home, find_nvcc  # noqa: F401 - find_nvcc: where callers of compile-only look for it
from ..core.config import cu_header_level, step_start

STUBS = {
    "c10/cuda/impl/cuda_cmake_macros.h": "#pragma once\n",
    "cusparse.h": ("#pragma once\ntypedef struct cusparseContext* cusparseHandle_t;\n"
                   "typedef enum { CUSPARSE_STATUS_SUCCESS = 0 } cusparseStatus_t;\n"
                   "const char* cusparseGetErrorString(cusparseStatus_t status);\n"),
    "cublas_v2.h": ("#pragma once\ntypedef struct cublasContext* cublasHandle_t;\n"
                    "typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;\n"),
    "cublasLt.h": "#pragma once\n#include <cublas_v2.h>\ntypedef struct cublasLtContext* cublasLtHandle_t;\n",
    "cusolver_common.h": ("#pragma once\ntypedef enum { CUSOLVER_STATUS_SUCCESS = 0, "
                          "CUSOLVER_STATUS_INVALID_VALUE = 3 } cusolverStatus_t;\n"),
    "cusolverDn.h": "#pragma once\n#include <cusolver_common.h>\ntypedef struct cusolverDnContext* cusolverDnHandle_t;\n",
}
STUB_MARK = "kb-harness compile-only stub"




def stub_dir(root: Path, search: list[str]) -> Path | None:
    """A folder with stubs for the STUBS headers found in none of `search`; None if none is missing."""
    missing = {rel: text for rel, text in STUBS.items() if not any(Path(d, rel).exists() for d in search)}
    if not missing:
        return None
    key = hashlib.sha256(repr(sorted(missing.items())).encode()).hexdigest()[:12]
    folder = Path(root) / f"compile-only-stubs-{key}"
    for rel, text in missing.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(f"// {STUB_MARK}\n{text}")
    return folder


class NotLoaded(types.ModuleType):
    """What load_inline returns in a compile-only run: calling anything says why it cannot run."""

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)

        def unavailable(*args, **kwargs):
            raise RuntimeError(f"compile-only run: extension '{self.__name__}' was compiled, not loaded")
        return unavailable


def make_jit_compile(stub_root: Path):
    """A replacement for torch.utils.cpp_extension._jit_compile that writes torch's ninja file
    and builds only the object files."""
    import torch.utils.cpp_extension as cpp_ext
    from torch.utils.file_baton import FileBaton

    def jit_compile(name, sources, extra_cflags, extra_cuda_cflags, extra_sycl_cflags, extra_ldflags,
                    extra_include_paths, build_directory, verbose, with_cuda, with_sycl, is_python_module,
                    is_standalone, keep_intermediates=True):
        if with_cuda is None:
            with_cuda = any(str(s).endswith((".cu", ".cuh")) for s in sources)
        if with_cuda and cpp_ext.CUDA_HOME is None:
            cpp_ext.CUDA_HOME = cuda_home()  # a CPU-only torch leaves it unset
        search = cpp_ext.include_paths("cuda" if with_cuda else "cpu")
        if cuda_home():
            search.append(str(Path(cuda_home(), "include")))
        stubs = stub_dir(stub_root, search) if with_cuda else None
        includes = list(extra_include_paths or []) + ([str(stubs)] if stubs else [])
        ninja_file = Path(build_directory) / "build.ninja"
        cpp_ext._write_ninja_file_to_build_library(
            path=str(ninja_file), name=name, sources=sources, extra_cflags=extra_cflags or [],
            extra_cuda_cflags=extra_cuda_cflags or [], extra_sycl_cflags=extra_sycl_cflags or [],
            extra_ldflags=extra_ldflags or [], extra_include_paths=includes, with_cuda=with_cuda,
            with_sycl=bool(with_sycl), is_standalone=False)
        targets = re.findall(r"^build (\S+\.o)\s*:", ninja_file.read_text(), re.MULTILINE)
        baton = FileBaton(os.path.join(build_directory, "lock"))  # another worker may compile the same sources
        while not baton.try_acquire():
            baton.wait()
        try:
            proc = subprocess.run(["ninja", "-v", *targets], cwd=build_directory, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace")
        finally:
            baton.release()
        print(proc.stdout, flush=True)
        if proc.returncode != 0:
            raise RuntimeError(f"Error building extension '{name}' (compile only)")
        return NotLoaded(name)

    return jit_compile


def compile_solutions(files: list[Path], cfg, *, arch: str = "9.0", jobs: int | None = None,
                      out=print) -> list[dict]:
    """Compile-only: import each solution in a build step that records its load_inline calls,
    then compile each recipe's object files (CUDA with nvcc, C++ with the host compiler) in a
    compile step, as a run builds its libraries (harness/compile/recipes.py: published in the cache's
    compile-only folder, reused by later checks); nothing is linked or loaded. No GPU is needed
    or used. Each item: {"path", "status", "message", "detail", "extensions"}, in `files`' order,
    each printed by `out` once its recipes are compiled.

    Two phases, so that the cores compile different recipes: every build step first (they take
    about a second each), then each distinct recipe once, the recipes spread over the workers in
    the order they were first met (many solutions share one library: a file-by-file pool had its
    workers wait on the same compile). A recipe that fails is compiled again for each other
    solution that records it, so that each gets its own message, as a run does (recipes.Compiles)."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from ..isolate import sandbox
    from .build import cache_dir_of
    from .failures import failure
    from ..isolate.isolation import close_fork_server, run_module
    from ..core.problems import _display, discover
    from .recipes import Compiler
    from ..core.solutions import problem_for
    cache_dir = cache_dir_of(cfg)
    cache_dir.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    workers = max(1, min(jobs or cfg.build.jobs or cores, len(files) or 1))
    env = {"CUDA_VISIBLE_DEVICES": "", "TORCH_CUDA_ARCH_LIST": arch, "MAX_JOBS": str(max(1, cores // workers))}
    if cuda_home():
        env["CUDA_HOME"] = cuda_home()
    plan = sandbox.prepare(cfg, [Path(f).resolve().parent for f in files]).to_dict()
    work_root = sandbox.work_folder("kb-compile-")
    hidden = [str(Path(cfg.results_dir).resolve()), str(cache_dir), str(work_root)]
    # torch.__version__, as the compile step names its folder (harness/compile/build.py folder_of): a
    # package's metadata may leave out the local label (the GPU host's torch: "2.11.0" against
    # "2.11.0+cu130"), and a name of another version made every recipe "ended without its library"
    compiler = Compiler(cache_dir, torch.__version__, arch, plan, hidden, env, cfg.timeouts.build_s,
                        cfg.build.pch != "off", cu_header_level(cfg.build.cu_header), step_start(cfg.build.start),
                        main_header=cfg.build.main_header)
    known = discover()

    def build_step(path: Path) -> dict:
        """The solution's build step: its recipes (compile-only) or why it failed; its work folder."""
        request = {"mode": "compile", "solution_path": str(Path(path).resolve()), "device": "cpu", "arch": arch,
                   "cache_dir": str(cache_dir)}
        owner = problem_for(Path(path), known)  # its module runs with the problem's names, as in KernelBench
        if owner is not None:
            request["problem_path"] = str(owner.path)
        work = Path(tempfile.mkdtemp(prefix="step-", dir=work_root))
        policy = None if plan["mode"] == "off" else sandbox.policy(
            plan, "cpu", scratch=work / "scratch", hidden=hidden,
            readable=[Path(path).resolve(), *([owner.path] if owner else [])])
        outcome = run_module("harness.run.worker", request, work, limit_s=cfg.timeouts.run_s,
                             phase_limits={"build": cfg.timeouts.build_s}, env=env, policy=policy,
                             start=compiler.start)
        failed = failure(outcome, "(timeouts.build_s)" if outcome.phase == "build" else "(timeouts.run_s)")
        recipes = [{**e["recipe"], "compile_only": True} for e in outcome.all("recipe")]
        return {"path": path, "work": work, "failed": failed,  # recipes: (its cache folder, the recipe)
                "recipes": [] if failed else [(str(compiler.folder(r)), r) for r in recipes],
                "item": {"path": _display(Path(path)), "extensions": [r["params"]["name"] for r in recipes]}}

    def finish(step: dict, done: dict) -> dict:
        """The solution's item: its build step's failure, else its first recipe that failed (compiled
        again in its own folder where another solution's compile of it failed first), else ok."""
        item, failed = step["item"], step["failed"]
        item["recipes"] = []
        for index, (key, recipe) in enumerate(step["recipes"]):
            if failed:
                break
            first, result = done[key]
            if result.failed and first is not step:
                result = compiler.run(recipe, step["work"] / f"compile{index}")
            failed = result.failed
            item["recipes"].append({k: result.ext[k] for k in ("name", "dir", "cached", "seconds", "cpu_s", "pch", "cu_header")
                                    if k in result.ext}
                                   | {"cached": result.ext.get("cached") or first is not step})
        shutil.rmtree(step["work"], ignore_errors=True)
        if failed:
            status, message, detail, _ = failed
            item.update(status=status.value, message=message, detail=detail)
        else:
            names = ", ".join(item["extensions"]) or "no load_inline call"
            item.update(status="ok", message=f"compiled ({names})", detail="")
        out(f"{item['path']}: {item['status']}: {item['message']}")
        return item

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            steps = list(pool.map(build_step, files))
            firsts: dict = {}  # recipe folder -> (the step that met it first, its recipe, where to compile)
            for step in steps:
                for index, (key, recipe) in enumerate(step["recipes"]):
                    firsts.setdefault(key, (step, recipe, step["work"] / f"compile{index}"))

            def compile_recipe(first):
                step, recipe, where = first
                return step, compiler.cached(recipe) or compiler.run(recipe, where)

            todo = [key for key, (_, recipe, _) in firsts.items() if compiler.cached(recipe) is None]
            out(f"compile-only: {len(files)} solution(s), {len(firsts)} distinct recipe(s), "
                f"{len(firsts) - len(todo)} compiled before; compiling {len(todo)} on {workers} worker(s) "
                f"(each about a minute of CPU: the torch headers)")
            pending = {key: pool.submit(compile_recipe, first) for key, first in firsts.items()}
            _follow([pending[key] for key in todo], out)
            items = []
            for step in steps:  # each printed once its recipes are done, in the files' order
                done = {key: pending[key].result() for key, _ in step["recipes"]}
                items.append(finish(step, done))
            costs = sorted(pending[key].result()[1].ext.get("cpu_s") or 0.0 for key in todo)
            read = [str(pending[key].result()[1].ext.get("cu_header")) for key in todo]
            small, lean = sum(r.startswith("read") for r in read), sum(r.startswith("read lean") for r in read)
            if costs:
                out(f"compile-only: {len(costs)} recipe(s) compiled, {sum(costs):.0f} CPU-s in all, "
                    f"{costs[len(costs) // 2]:.0f} CPU-s the median recipe"
                    + (f"; {small} cuda.cu read a smaller torch header than torch/extension.h, {lean} of them the "
                       f"lean one (build.cu_header)" if small else ""))
            return items
    finally:
        close_fork_server()
        shutil.rmtree(work_root, ignore_errors=True)


def _follow(futures: list, out) -> None:
    """Progress of the recipes being compiled, with an estimate of what is left, as each is done
    (a callback: each file's own line still comes once its recipes are): a bar in a terminal
    (tqdm), else a line."""
    import sys
    import threading
    import time
    if not futures:
        return
    start, total, lock, count = time.monotonic(), len(futures), threading.Lock(), [0]
    bar = None
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
            bar = tqdm(total=total, desc="compile", unit="recipe", file=sys.stderr)
        except ImportError:
            bar = None

    def one_done(_future) -> None:
        with lock:
            count[0] += 1
            done = count[0]
            if bar is not None:
                bar.update(1)
                if done == total:
                    bar.close()
                return
            elapsed = time.monotonic() - start
            left = elapsed / done * (total - done)
            out(f"compile-only: {done}/{total} recipe(s) compiled in {elapsed:.0f} s"
                + (f", about {max(1, round(left / 60))} min left" if done < total else ""))

    for future in futures:
        future.add_done_callback(one_done)
