"""Whose code raised an exception in the worker: the solution's, the problem's or the harness's.

The worker runs three kinds of code in one process: the solution (and the extensions and helper
files it loads), the problem file (the reference, its inputs) and the harness itself. A failure
is the solution's only when it was raised there. The traceback says where: walking from the
innermost frame outwards, frames of installed libraries (the standard library, torch, triton,
...) are passed over, since they run on behalf of whoever called them, and the first frame left
decides:

* a frame of `for_solution` (below): the harness was calling into the solution (its import,
  constructor, forward, an extension function or torch's load_inline on its behalf), so whatever
  was raised beneath belongs to the solution;
* a file under harness/: the harness's own failure (`harness_error`, with that frame named);
* the problem file: the reference's failure (also `harness_error`: the solution is not to blame);
* any other file (the solution file, its helper modules, generated code): the solution.

A SyntaxError carries the file it is in rather than a frame; its filename decides.
"""
from __future__ import annotations

import site
import sys
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from .. import REPO_ROOT

HARNESS_DIR = Path(__file__).resolve().parent.parent   # harness/, its parts' folders within


def for_solution(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call `fn` on the solution's behalf. Route every call into solution code through here (the
    import, the constructor, forward, a wrapped extension function): an exception raised beneath
    this frame, outside the harness's own files, is the solution's."""
    return fn(*args, **kwargs)


_MARKER = for_solution.__code__


@dataclass(frozen=True)
class Blame:
    owner: str          # "solution", "harness" or "problem"
    where: str          # "file:line (function)" of the deciding frame, or "" when none was found

    @property
    def solution(self) -> bool:
        return self.owner == "solution"


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= set(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    roots.add(site.getusersitepackages() if hasattr(site, "getusersitepackages") else None)
    roots |= {sys.base_prefix + "/lib", sys.prefix + "/lib"}
    return tuple(sorted(str(Path(r).resolve()) for r in roots if r))


def _is_library(filename: str) -> bool:
    if filename.startswith("<frozen"):
        return True
    if filename.startswith("<"):
        return False  # exec'd or generated code: whoever made it owns it
    resolved = str(Path(filename).resolve())
    repo = str(REPO_ROOT) + "/"
    # An installed library's root may lie inside the checkout (a `.venv/` there), or the checkout
    # inside a library root: a file is the library's unless it is the checkout's own.
    return any((resolved == root or resolved.startswith(root + "/"))
               and (not resolved.startswith(repo) or not repo.startswith(root + "/"))
               for root in _library_roots())


def _owner(filename: str, problem_path: Path | None) -> str:
    if filename.startswith("<"):
        return "solution"
    resolved = Path(filename).resolve()
    if resolved.parent.parent == HARNESS_DIR or resolved.parent == HARNESS_DIR:
        return "harness"
    if problem_path is not None and resolved == Path(problem_path).resolve():
        return "problem"
    return "solution"


def _display(filename: str) -> str:
    try:
        return str(Path(filename).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return filename


def blame(exc: BaseException, problem_path: Path | None = None) -> Blame:
    """Whose code raised `exc` (see the module docstring)."""
    if isinstance(exc, SyntaxError) and exc.filename and not _is_library(exc.filename):
        owner = _owner(exc.filename, problem_path)
        return Blame(owner, f"{_display(exc.filename)}:{exc.lineno}")
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    for tb in reversed(frames):
        code = tb.tb_frame.f_code
        if code is _MARKER:
            return Blame("solution", "")
        if _is_library(code.co_filename):
            continue
        return Blame(_owner(code.co_filename, problem_path),
                     f"{_display(code.co_filename)}:{tb.tb_lineno} ({code.co_name})")
    return Blame("harness", "")

