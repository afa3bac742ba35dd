"""torch/extension.h precompiled once for every main.cpp compiled with the same flags.

load_inline's main.cpp begins with `#include <torch/extension.h>`: about 400,000 lines that g++
parses for every recipe, most of what its main.cpp costs (docs/harness-perf.md, "The builds").
GCC looks for `torch/extension.h.gch` in each folder of the include path before the header
itself, and uses it only where it is valid for the compile's options; where it is not, the search
goes on to the header. The object is the same either way (measured byte for byte). So a folder
that holds `torch/extension.h.gch`, put on main.cpp's include path by one `-I` in the compile's
C++ flags (searched after the recipe's own include folders, before torch's -isystem ones), lets
the compile start from the precompiled state. Beside it, a copy of torch's `torch/extension.h`:
a main.cpp that includes the header again (2 of corpus100's 100 cpp_sources begin with it) has GCC
read the file itself from the folder where it found the first, and match it to the one the
precompiled state holds (`#pragma once`); without the copy that second include is "No such file".

Trust: the header is precompiled by the trusted side (`python -m harness.compile.pch`, run by the
runner's Compiler, exec'd or forked by its fork server as build.start says and never sandboxed;
never by the sandboxed compile step), from torch's own header with torch's own
flags for the recipe, and only for a recipe whose extra C++ flags all come from SAFE (none names a
file or runs a program) and that adds no include folder of its own (which could shadow a header
torch/extension.h includes). The compile step only reads it.

Cost: a precompiled header is about 800 MB and about 50 CPU-s; one is made for a set of flags the
second time a recipe asks for it (a one-off set never pays), in the background: no build waits for
it, those that ask before it is made parse the header; beyond KEEP the least recently used are
removed (a compile that finds its folder gone parses the header, as without).
"""
from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..isolate.isolation import start_step

GCH = Path("torch") / "extension.h.gch"
# build.main_header lean: a folder whose torch/extension.h leaves out torch's C++ frontend (its comment
# says what it holds); precompiled like torch's own for such a recipe (header_for's `lean`)
MAIN_HEADER_LEAN = Path(__file__).resolve().parent / "main_header_lean"
LAYOUT = 2      # in the folder's key: 2 = the header copied beside its .gch (1's folders lack it)
KEEP = 4
# flags that change how the header is compiled but name no file and run no program
SAFE = re.compile(r"-(O[0-3sgz]?|g[0-3]?|std=[\w+]+|[DU][A-Za-z_]\w*(=[\w.+-]*)?|W[\w=+-]*|w|pthread|"
                  r"f(?!plugin)[\w=.+-]+|m[\w=.+-]+)")
_UNKNOWN, _PENDING = object(), object()
_memo: dict[tuple, Any] = {}      # flag set -> its folder, None (never), or _PENDING (a thread makes it)
_helpers: set = set()             # the helpers running: Popen or forkserver.ForkedProc
_failed: dict[tuple, str] = {}   # flag set -> why it could not be made
_PID = os.getpid()
_lock = threading.Lock()


def eligible(params: dict[str, Any]) -> bool:
    """Whether a recipe's main.cpp may read a precompiled torch/extension.h: it begins with
    load_inline's implicit include, adds no include folder, and every extra C++ flag is SAFE (an
    empty one, as KernelBench's template passes, is none: torch joins the flags with spaces)."""
    flags = params.get("extra_cflags") or []
    return (bool(params.get("cpp_sources")) and not params.get("no_implicit_headers") and not params.get("use_pch")
            and not params.get("extra_include_paths") and isinstance(flags, list)
            and all(isinstance(f, str) and (not f or SAFE.fullmatch(f)) for f in flags))


def header_for(root: Path, params: dict[str, Any], env: dict[str, str],
               lean: bool = False, start: str = "exec") -> tuple[str | None, str]:
    """(the folder to put on the recipe's C++ include path or None, why: "read", "not eligible",
    "asked once so far", "being made", "failed: ..."). `lean`: the header precompiled is
    MAIN_HEADER_LEAN's (build.main_header), not torch's. Memoized per flag set for the process's
    life. The ask that makes one does not wait for it: the header is precompiled by a thread of this
    process (its helper a child process) while that recipe and the others asked meanwhile compile
    without it, so builds started together are not held up by it (docs/harness-perf.md). `start`:
    how the helper starts (build.start: exec, a fresh interpreter importing torch; fork, by this
    process's fork server, which imported it once)."""
    if not eligible(params):
        return None, "not eligible"
    with_cuda = params.get("with_cuda")
    with_cuda = bool(params.get("cuda_sources")) if with_cuda is None else bool(with_cuda)
    signature = (str(root), with_cuda, tuple(f for f in params.get("extra_cflags") or [] if f), lean)
    with _lock:
        known = _memo.get(signature, _UNKNOWN)
        if known is None:
            return None, _failed.get(signature, "failed")
        if known is _PENDING:
            return None, "being made"
        if known is not _UNKNOWN and (Path(known) / GCH).is_file():
            os.utime(known)
            return known, "read"
    request = {"root": str(root), "with_cuda": with_cuda, "extra_cflags": list(signature[2]), "lean": lean}
    answer = _helper(request, env, "ask", start)
    if answer.get("why") == "to make":
        with _lock:
            if _memo.get(signature, _UNKNOWN) is _PENDING:
                return None, "being made"
            _memo[signature] = _PENDING
        threading.Thread(target=_make_for, args=(signature, request, env, start), name="kb-pch", daemon=True).start()
        return None, "being made"
    if answer.get("folder") or answer.get("why") == "failed":   # asked once only so far: asked again next time
        with _lock:
            _memo[signature] = answer.get("folder")
            if not answer.get("folder"):
                _failed[signature] = _failure(answer)
    if answer.get("folder"):
        return answer["folder"], "read"
    if answer.get("why") == "first":
        return None, "asked once so far"
    return None, _failure(answer) if answer.get("why") == "failed" else str(answer.get("why"))


def _failure(answer: dict[str, Any]) -> str:
    last = [line for line in str(answer.get("log") or "").splitlines() if line.strip()][-1:]
    return "failed" + (f": {last[0].strip()[:300]}" if last else "")


def _helper(request: dict[str, Any], env: dict[str, str], what: str, start: str = "exec") -> dict[str, Any]:
    """`python -m harness.compile.pch` (the trusted side's helper, which imports torch) asked to
    `what` (ask | make); {"why": "failed"} where it fails or runs past 900 s. Started as this
    process's own child (exec) or its fork server's (fork), never sandboxed: the runner reaps every
    other child as an orphan of a sandboxed step (on the H200 that killed every helper, and no
    main.cpp read a header). Its answer is the last line of its output that is a JSON object."""
    with tempfile.TemporaryDirectory(prefix="kb-pch-helper-") as scratch:
        log_path = Path(scratch) / "helper.log"
        with open(log_path, "w") as log:
            proc = start_step("harness.compile.pch", [json.dumps({**request, "what": what})], None, env, log, (),
                              start=start)
        with _lock:
            _helpers.add(proc)
        try:
            proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return {"why": "failed", "log": "the helper ran past 900 s"}
        finally:
            with _lock:
                _helpers.discard(proc)
        text = log_path.read_text(errors="replace")
    if proc.returncode:
        return {"why": "failed", "log": f"the helper exited {proc.returncode}\n{text[-2000:]}"}
    for line in reversed(text.splitlines()):
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict):
            return answer
    return {"why": "failed", "log": f"the helper's answer: none in its output\n{text[-2000:]}"}


def _make_for(signature: tuple, request: dict[str, Any], env: dict[str, str], start: str) -> None:
    answer = _helper(request, env, "make", start)
    with _lock:
        _memo[signature] = answer.get("folder")   # None where it failed: not asked again by this process
        if not answer.get("folder"):
            _failed[signature] = _failure(answer)


@atexit.register
def _stop_helpers() -> None:
    """A header still being made when the process ends is given up (its helper removes what it
    wrote), rather than left compiling after the command has returned (by the process that started
    it only: a forked copy holds the same list)."""
    if os.getpid() != _PID:
        return
    with _lock:
        helpers = list(_helpers)
    for proc in helpers:
        proc.terminate()
    for proc in helpers:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _torch_flags(with_cuda: bool, extra_cflags: list[str], scratch: Path) -> tuple[str, list[str], list[str]]:
    """torch's C++ compiler and flags for main.cpp of such a recipe, as its ninja file has them,
    without the extension's name."""
    import torch.utils.cpp_extension as cpp_ext
    if with_cuda and cpp_ext.CUDA_HOME is None:
        from .build import cuda_home
        cpp_ext.CUDA_HOME = cuda_home()
    sources = [str(scratch / "main.cpp")] + ([str(scratch / "cuda.cu")] if with_cuda else [])
    ninja = scratch / "build.ninja"
    cpp_ext._write_ninja_file_to_build_library(
        path=str(ninja), name="kb_pch", sources=sources, extra_cflags=extra_cflags, extra_cuda_cflags=[],
        extra_sycl_cflags=[], extra_ldflags=[], extra_include_paths=[], with_cuda=with_cuda, with_sycl=False,
        is_standalone=False)
    lines = dict(re.findall(r"^(cxx|cflags|post_cflags) = ?(.*)$", ninja.read_text(), re.MULTILINE))
    flags = [f for f in shlex.split(lines.get("cflags", "")) if f != "-DTORCH_EXTENSION_NAME=kb_pch"]
    return lines.get("cxx", "c++"), flags, shlex.split(lines.get("post_cflags", ""))


def _prune(root: Path, keep: int = KEEP) -> None:
    made = sorted((p for p in root.iterdir() if p.is_dir() and (p / GCH).is_file()),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for old in made[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def make(root: Path, with_cuda: bool, extra_cflags: list[str], what: str = "both", lean: bool = False) -> dict[str, Any]:
    """`what` "ask": {"folder": ...} where the header for these flags is made; else count the ask
    (beside it) and answer {"why": "first"} the first time, {"why": "being made"} while a helper
    makes it, {"why": "to make"} from the second time. "make": precompile it now (or wait for the
    helper that is making it) and answer {"folder"} or {"why": "failed", "log"}. "both": ask, and
    make where the answer is "to make"."""
    import torch
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        cxx, flags, post = _torch_flags(with_cuda, extra_cflags, Path(scratch))
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(json.dumps([torch.__version__, cxx, version, flags, post, LAYOUT]
                                    + (["lean"] if lean else [])).encode()).hexdigest()[:20]
    folder = root / key
    if what in ("ask", "both"):
        answer = _ask(root, key)
        if what == "ask" or answer.get("why") != "to make":
            return answer
    with open(root / f"{key}.making", "a+") as making:
        fcntl.flock(making, fcntl.LOCK_EX)      # one maker at a time; a second waits and finds it made
        if (folder / GCH).is_file():
            os.utime(folder)
            return {"folder": str(folder)}
        for stale in root.glob(f".{key}.*"):     # a maker killed before its cleanup (this lock is free only then)
            shutil.rmtree(stale, ignore_errors=True)
        answer = _precompile(folder, cxx, flags, post, lean)
    if answer.get("folder"):
        _prune(root)
    return answer


def _ask(root: Path, key: str) -> dict[str, Any]:
    folder = root / key
    with open(root / f"{key}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # held only to read and count
        if (folder / GCH).is_file():
            os.utime(folder)
            return {"folder": str(folder)}
        with open(root / f"{key}.making", "a+") as making:
            try:
                fcntl.flock(making, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return {"why": "being made"}
        lock.seek(0)
        asked = int(lock.read().strip() or 0) + 1
        lock.seek(0)
        lock.truncate()
        lock.write(str(asked))
        lock.flush()
        return {"why": "first"} if asked < 2 else {"why": "to make"}


def _precompile(folder: Path, cxx: str, flags: list[str], post: list[str], lean: bool = False) -> dict[str, Any]:
    """torch/extension.h (MAIN_HEADER_LEAN's where `lean`) precompiled into `folder` (through a
    staging folder beside it, removed whatever ends the compile: a SIGTERM of the helper exits
    through here)."""
    import torch
    import torch.utils.cpp_extension as cpp_ext
    header = (MAIN_HEADER_LEAN if lean else Path(cpp_ext.__file__).resolve().parents[1] / "include") \
        / "torch" / "extension.h"
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        (staging / GCH.parent).mkdir(parents=True)
        start = time.monotonic()
        proc = subprocess.run([cxx, *flags, "-x", "c++-header", str(header), "-o", str(staging / GCH), *post],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return {"why": "failed", "log": proc.stdout[-2000:] + proc.stderr[-2000:]}
        (staging / "made.json").write_text(json.dumps({"flags": flags, "post": post, "cxx": cxx, "torch": torch.__version__,
                                                       "seconds": round(time.monotonic() - start, 1)}))
        shutil.copyfile(header, staging / GCH.with_suffix(""))   # a second include reads it (the docstring)
        for path in (staging, staging / GCH.parent):
            os.chmod(path, 0o755)
        for path in (staging / GCH, staging / GCH.with_suffix("")):
            os.chmod(path, 0o644)
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(staging, folder)
        return {"folder": str(folder)}
    finally:
        shutil.rmtree(staging, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # through make's cleanup
    request = json.loads(sys.argv[1])
    print(json.dumps(make(Path(request["root"]), bool(request["with_cuda"]), list(request["extra_cflags"]),
                          request.get("what", "both"), bool(request.get("lean")))))
