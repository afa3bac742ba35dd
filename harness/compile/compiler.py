"""The compile step: python -m harness.compile.compiler --request-fd R --events-fd E.

It builds one recipe, what a solution's load_inline call asked for as its build step recorded it
(harness/compile/build.py), in a folder of its own, and loads nothing: no code of the solution's runs
here, only the compiler on its sources with its flags. Flags can make a compiler run code (a
plugin, another assembler), so the step runs in the sandbox like the build step; whatever it
does, its output serves only the same recipe: the runner publishes it into the build cache under
the key the runner computes itself from the recipe (harness/compile/recipes.py).

Request: {"recipe": {...}, "build_root": the folder to build in, "compile_only": whether to
compile the object files only (the CI gate's compile-only check), "arch": the build key's
architecture (TORCH_CUDA_ARCH_LIST is set to it for CUDA sources), "pch": a folder holding a
precompiled torch/extension.h for main.cpp, "cu_header": the headers cuda.cu is compiled with, in
turn until one builds (HEADER_RUNGS: "lean", "small" or "off")}.
Events: build_start, build_end (as a worker's, harness/run/pipeline.py build_info), then done, or
error with a build_error's message mapped back to the solution's line.
"""
from __future__ import annotations

import copy
import inspect
import json
import os
import re
import resource
import sys
import time
import types
from pathlib import Path
from typing import Any

from .build import LOG_NAME, BuildError, _capture_fds, build_key, first_errors, folder_of
from ..core.events import EventWriter
from .inline import Layout, candidate_files, describe_build_error
from .pch import MAIN_HEADER_LEAN, eligible
from ..isolate.isolation import die_with_parent

# A folder whose torch/extension.h is torch/types.h, which load_inline prepends to every cuda.cu:
# first on a recipe's cuda.cu include path, it spares the .cu torch's C++ frontend and Python
# bindings (about 30 of 60 CPU-s for a generated kernel's .cu: docs/harness-perf.md); a .cu that
# uses them fails with it, and is compiled again without it.
CU_HEADER = Path(__file__).resolve().parent / "cu_header"
# Leaner still: a folder whose torch/types.h and torch/extension.h are the tensor, TORCH_CHECK, the
# dispatch macros, the device guard and torch's factories, without every operator's declarations
# (about 10 CPU-s less than CU_HEADER on a generated kernel's .cu: docs/harness-perf.md).
CU_HEADER_LEAN = Path(__file__).resolve().parent / "cu_header_lean"
# build.cu_header's levels: the include folders a recipe's cuda.cu is compiled with, in turn, until
# one builds (None: torch's own headers, the build that counts where every other fails);
# harness/core/config.py cu_header_level says which a setting means
HEADER_RUNGS = {"off": (None,), "small": (CU_HEADER, None), "lean": (CU_HEADER_LEAN, CU_HEADER, None)}
_READ = {CU_HEADER: "read", CU_HEADER_LEAN: "read lean"}


class Built(types.ModuleType):
    """What load_inline returns here: the library is built, not imported."""


def _build_only(cpp_ext):
    """torch's _jit_compile, but for loading: write the ninja file and build the library."""
    build = cpp_ext._write_ninja_file_and_build_library
    takes = set(inspect.signature(build).parameters)

    def jit_compile(name, sources, extra_cflags, extra_cuda_cflags, extra_sycl_cflags, extra_ldflags,
                    extra_include_paths, build_directory, verbose, with_cuda, with_sycl, is_python_module,
                    is_standalone, keep_intermediates=True):
        if with_cuda is None:
            with_cuda = any(str(s).endswith((".cu", ".cuh")) for s in sources)
        args = {"name": name, "sources": sources, "extra_cflags": extra_cflags, "extra_cuda_cflags": extra_cuda_cflags,
                "extra_sycl_cflags": extra_sycl_cflags, "extra_ldflags": extra_ldflags,
                "extra_include_paths": extra_include_paths, "build_directory": build_directory, "verbose": verbose,
                "with_cuda": with_cuda, "with_sycl": with_sycl, "is_standalone": is_standalone}
        build(**{k: v for k, v in args.items() if k in takes})
        return Built(name)
    return jit_compile


def _children_cpu_s() -> float:
    """CPU seconds (user and system) of this process's finished children and theirs: ninja and
    every compiler it ran (each waited for in turn), so a recipe's CPU cost whatever ran in parallel."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _with_include(jit_compile, cxx: str | None = None, cuda: str | None = None):
    """jit_compile with one more include folder after the recipe's own: `cxx` on main.cpp's flags (the
    folder of a precompiled torch/extension.h, harness/compile/pch.py; nvcc never reads it), `cuda` on
    nvcc's (CU_HEADER)."""
    if not cxx and not cuda:
        return jit_compile

    def compile_with(name, sources, extra_cflags, extra_cuda_cflags, *args, **kwargs):
        return jit_compile(name, sources, [*(extra_cflags or []), f"-I{cxx}"] if cxx else extra_cflags,
                           [*(extra_cuda_cflags or []), f"-I{cuda}"] if cuda else extra_cuda_cflags, *args, **kwargs)
    return compile_with


def _only_main_failed(log: str) -> bool:
    """Whether every step ninja reports FAILED is main.o's: main.cpp does not read CU_HEADER (nvcc's
    flags only), so it would fail the same way with torch's header: no second compile."""
    failed = re.findall(r"^FAILED: (?:\[code=-?\d+\] )?(\S+)", log, re.MULTILINE)
    return bool(failed) and all(target == "main.o" for target in failed)


def _first_error_line(log: str) -> str:
    found = first_errors(log, limit=1).strip()
    return (found.splitlines() or ["it failed"])[0][:200]


def compile_recipe(recipe: dict[str, Any], build_root: Path, compile_only: bool, arch: str, emit,
                   pch: str | None = None, cu_header: str = "off", main_header: str = "full") -> Path:
    """Build `recipe` for `arch` in build_root/<its folder>; its folder, or BuildError. `pch`: a
    folder holding a precompiled torch/extension.h for main.cpp (MAIN_HEADER_LEAN's where
    `main_header` is lean). `cu_header`: a level of HEADER_RUNGS: its cuda.cu compiled with each of
    its folders in turn until one builds, the last without any (the build that counts where the
    others fail: its log, its error); `build_end` says which in `cu_header`. `main_header` lean: an
    eligible main.cpp (pch.eligible) compiled first with MAIN_HEADER_LEAN's torch/extension.h, and
    where only main.o fails, again with torch's; `build_end` says which in `main_header`."""
    import torch
    import torch.utils.cpp_extension as cpp_ext

    from .compile_only import make_jit_compile
    from ..core.problems import _display
    params = dict(recipe["params"])
    name = params["name"]
    key = build_key(params, torch.__version__, arch)
    build_dir = Path(build_root) / folder_of(params, torch.__version__, arch, compile_only)
    build_dir.mkdir(parents=True, exist_ok=True)
    info = {"name": name, "dir": str(build_dir), "key": key, "cached": False,
            "nice": os.getpriority(os.PRIO_PROCESS, 0)}   # its compilers' (build.stagger)
    emit("build_start", **info)
    layout = Layout.of(params["cpp_sources"], params.get("cuda_sources"), bool(params.get("no_implicit_headers")))
    log_path = build_dir / "harness_build.current.log"
    jit_compile = make_jit_compile(Path(build_root)) if compile_only else _build_only(cpp_ext)
    start, cpu = time.monotonic(), _children_cpu_s()
    rungs = HEADER_RUNGS[cu_header] if params.get("cuda_sources") else (None,)
    if cu_header != "off" and not params.get("cuda_sources"):
        info["cu_header"] = "no cuda sources"
    # main.cpp's include folders in turn: the lean header's (precompiled where `pch`), then torch's own
    mains = [pch or str(MAIN_HEADER_LEAN), None] if main_header == "lean" and eligible(params) else [pch]
    if main_header == "lean":
        info["main_header"] = "lean" if len(mains) == 2 else "not eligible"
    failed_lean, rung, at = "", 0, 0
    while True:
        folder = rungs[rung]
        cpp_ext._jit_compile = _with_include(jit_compile, cxx=mains[at], cuda=str(folder) if folder else None)
        try:
            with _capture_fds(log_path):  # a copy each time: load_inline adds its headers to the lists it is given
                cpp_ext.load_inline(**copy.deepcopy(params), build_directory=str(build_dir), verbose=True)
        except Exception as exc:  # noqa: BLE001 - a failed build is the recipe's, with its log
            log = log_path.read_text(errors="replace")
            if at + 1 < len(mains) and _only_main_failed(log):  # main.cpp needs more: torch's own header
                info["main_header"] = f"compiled again with torch's header: {_first_error_line(log)}"
                at += 1
                continue
            if folder and _only_main_failed(log):
                info["cu_header"] = f"{_READ[folder]}; main.cpp failed, which does not read it"
            elif folder == CU_HEADER_LEAN:  # the .cu needs more: the next rung
                failed_lean = f" (the lean header failed: {_first_error_line(log)})"
                rung += 1
                continue
            elif folder:  # the .cu needs torch's whole header: compiled again with it, the build that counts
                info["cu_header"] = f"compiled again with torch's header: {_first_error_line(log)}"
                rung += 1
                continue
            if str(exc) and str(exc) not in log:
                log += f"\n{type(exc).__name__}: {exc}\n"
            emit("build_end", **info, ok=False, seconds=time.monotonic() - start, cpu_s=_children_cpu_s() - cpu,
                 log=log)
            site = describe_build_error(log, layout, candidate_files(Path(c) for c in recipe.get("callers", [])),
                                        _display)
            raise BuildError(name, log, str(build_dir), site) from None
        if folder:
            info["cu_header"] = _READ[folder] + (failed_lean if folder == CU_HEADER else "")
        break
    log = log_path.read_text(errors="replace")
    (build_dir / LOG_NAME).write_text(log)
    log_path.unlink()
    emit("build_end", **info, ok=True, seconds=time.monotonic() - start, cpu_s=_children_cpu_s() - cpu, log=log)
    return build_dir


def main(argv: list[str]) -> None:
    die_with_parent()
    with os.fdopen(int(argv[2])) as f:
        request = json.loads(f.read())
    events = EventWriter(int(argv[4]))
    events.emit("sandbox", **json.loads(os.environ.get("KB_SANDBOX_REPORT") or '{"mode": "off", "active": []}'))
    events.emit("phase", phase="build")
    try:
        if not request.get("keep_nice"):   # build.stagger: the build thread's nice is already its place's
            os.nice(10)  # compiling yields the CPU to the lanes' timed calls
        compile_recipe(request["recipe"], Path(request["build_root"]), bool(request.get("compile_only")),
                       request["arch"], events.emit, request.get("pch"), request.get("cu_header") or "off",
                       request.get("main_header") or "full")
        events.emit("done")
    except BuildError as exc:
        events.emit("error", status="build_error", message=str(exc), detail=exc.log[-20000:], phase="build")
    except Exception as exc:  # noqa: BLE001 - every path ends in an outcome
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
        events.emit("error", status="build_error", message=f"building extension '{request['recipe'].get('name')}' "
                    f"failed: {first_errors(str(exc)) or first}", detail=str(exc)[-20000:], phase="build")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
