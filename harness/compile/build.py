"""load_inline under a content-hash build directory, with the full compiler log kept.

`install_hook` replaces torch.utils.cpp_extension.load_inline in the worker process (before the
solution is imported) with a wrapper that:
  * keys the build directory by a hash of (sources, functions, flags, torch version, CUDA arch),
    so identical sources build once and two solutions that share an extension name never collide;
  * reports CUDA sources as needing a CUDA device when there is none (the pair is skipped);
  * checks the call for misuse before compiling (harness/compile/inline.py) and raises InlineMisuse;
  * in a build step (`record`): compiles nothing. It records the call as a recipe (its arguments
    as plain data, its key, where it was made) and returns a stand-in module; the runner compiles
    each recipe in a compile step that runs no solution code (harness/compile/compiler.py) and publishes
    the result in the build cache under the key it computes itself (harness/compile/recipes.py), so the
    cache holds only what its recipes compile to, whatever a build step did;
  * in a worker: imports the library of a recipe the lane staged for it (`prebuilt`), nothing
    written; a call no recipe covers builds in the worker's own folder, never shared:
    captures everything the compiler prints into <build dir>/harness_build.log and raises
    BuildError when compiling or linking fails, with the first error mapped back to the line of
    the solution (or .cu file) where that source line is written, and the full log.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

from ..core.blame import for_solution
from .inline import ErrorSite, Layout, as_list, candidate_files, check_call, describe_build_error

LOG_NAME = "harness_build.log"


class BuildError(Exception):
    def __init__(self, name: str, log: str, build_dir: str, site: ErrorSite | None = None):
        self.name = name
        self.log = log
        self.build_dir = build_dir
        self.site = site
        message = (site.message(name) if site else
                   f"building extension '{name}' failed: {first_errors(log) or 'see the build log'}")
        super().__init__(message)


class InlineMisuse(Exception):
    """load_inline called in a way that cannot work, found before compiling."""

    def __init__(self, where: str, problems: list[str]):
        self.where = where
        super().__init__(f"{where}: load_inline misuse: {'; '.join(problems)}")


class NeedsCuda(Exception):
    """The solution needs a CUDA device and this run has none: the pair is skipped."""


class ExtensionDeferred(Exception):
    """A recorded extension was used while a build step imported its solution (before it is built)."""


class Recorded(types.ModuleType):
    """What load_inline returns in a build step: the extension is compiled after the step, from
    its recipe; using it during the step's import says so (the pair then goes on to its worker,
    which imports the solution with the library built)."""

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        raise ExtensionDeferred(f"extension '{self.__name__}' is compiled after the build step (from what its "
                                f"load_inline call recorded); its function '{item}' was used during the import")



def find_nvcc() -> str | None:
    """CUDA's compiler: $CUDA_HOME/bin/nvcc (or $CUDA_PATH's), else the one on PATH; None without."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and Path(home, "bin", "nvcc").exists():
        return str(Path(home, "bin", "nvcc"))
    return shutil.which("nvcc")


def cuda_home() -> str | None:
    """The toolkit root, following wrapper scripts (e.g. /usr/local/bin/nvcc -> cuda-13.0)."""
    nvcc = find_nvcc()
    if not nvcc:
        return None
    real = Path(os.path.realpath(nvcc))
    try:
        text = real.read_text(errors="replace")[:2000] if real.stat().st_size < 4096 else ""
    except OSError:
        text = ""
    m = re.search(r"(/\S+)/bin/nvcc\b", text)
    return m.group(1) if m else str(real.parent.parent)


def plain_params(params: dict[str, Any]) -> dict[str, Any]:
    """load_inline's arguments as plain data (a recipe crosses processes as JSON): paths as
    strings, tuples as lists; build_directory and verbose left out (they do not change what is
    built). Anything else is a misuse: it could not be compiled where it was not made."""
    def plain(value: Any, name: str) -> Any:
        if value is None or isinstance(value, (str, bool, int, float)):
            return value
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        if isinstance(value, (list, tuple)):
            return [plain(v, name) for v in value]
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: plain(v, name) for k, v in value.items()}
        raise TypeError(f"load_inline's argument '{name}' is a {type(value).__name__}, not strings, "
                        f"lists or paths")
    return {name: plain(value, name) for name, value in params.items() if name not in ("build_directory", "verbose")}


KEY_SCHEME = 2   # how build_key names a build folder: a manifest of another scheme names folders no worker looks for


def manifest_key(solution, torch_version: str, arch: str, device: str) -> str:
    """What a build step's outcome depends on: the solution's sources (the file and its helpers),
    torch, the architecture and the device, and how build folders are named (KEY_SCHEME). Pairs
    with the same key build once (harness/run/runner.py)."""
    return hashlib.sha256(json.dumps([solution.sources_sha256, torch_version, arch, device, KEY_SCHEME])
                          .encode()).hexdigest()[:32]


def _manifest_path(cache_root: Path, solution, torch_version: str, arch: str, device: str) -> Path:
    return Path(cache_root) / "manifests" / f"{manifest_key(solution, torch_version, arch, device)}.json"


def write_manifest(cache_root: Path, solution, torch_version: str, arch: str, device: str,
                   build: dict[str, Any], skipped: str | None = None) -> None:
    """Record that this solution's sources (the file and its helpers) built here, and into which
    build directories; or that on this device the build step skips it (`skipped`: the message)."""
    path = _manifest_path(cache_root, solution, torch_version, arch, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temporary file of its own: build steps of identical sources may finish at once, in threads
    # of one process (the runner) or in processes of several (a cluster's nodes sharing the cache)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"solution": str(solution.path), "extensions": build.get("extensions", []),
                            "skipped": skipped}))
    os.replace(tmp, path)


def read_manifest(cache_root: Path, solution, torch_version: str, arch: str, device: str,
                  present: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """The manifest of an earlier build step of the same sources, if `present` says that what it
    built is still where the lanes look for it; then the build step need not run again (a solution
    that builds anything else on import still builds it, in the worker)."""
    path = _manifest_path(cache_root, solution, torch_version, arch, device)
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return manifest if present(manifest) else None


def default_cache_dir() -> Path:
    env = os.environ.get("KB_BUILD_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kb-harness" / "builds"


def cache_dir_of(cfg) -> Path:
    """The run's build cache: build.cache_dir, else the default."""
    return Path(cfg.build.cache_dir) if cfg.build.cache_dir else default_cache_dir()


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


INCLUDE_FILES, INCLUDE_BYTES = 2000, 64 << 20   # an include folder larger than this is keyed by its path


def include_digest(path: str) -> str:
    """An include folder as a build key sees it: a digest of what it holds (each file's path
    within it and its bytes, links followed as the compiler follows them), so that the same
    headers at two paths (a checkout and the CI gate's export of a revision) build once, and an
    edited header builds anew at the same path. A folder that cannot be read whole, or holds more
    than INCLUDE_FILES files or INCLUDE_BYTES bytes (a system folder), is keyed by its path."""
    top = Path(path)
    digest, files, size = hashlib.sha256(), 0, 0
    try:
        if not top.is_dir():
            return path
        for folder, dirs, names in os.walk(top, onerror=_raise):
            dirs.sort()
            for name in sorted(names):
                file = Path(folder) / name
                files += 1
                size += file.stat().st_size
                if files > INCLUDE_FILES or size > INCLUDE_BYTES:
                    return path
                data = file.read_bytes()
                digest.update(f"{file.relative_to(top)}\0{len(data)}\0".encode())
                digest.update(data)
    except OSError:
        return path
    return f"sha256:{digest.hexdigest()}"


def _raise(exc: OSError) -> None:
    raise exc


def build_key(plain: dict[str, Any], torch_version: str, arch: str) -> str:
    """The key of a recipe (plain_params of a load_inline call), the torch it builds against and
    the architecture: the build folder's name is the extension's name and its first 16 digits.
    Its include folders count by what they hold, not where (include_digest)."""
    includes = plain.get("extra_include_paths")
    if includes:
        plain = {**plain, "extra_include_paths": [include_digest(p) for p in
                                                  ([includes] if isinstance(includes, str) else includes)]}
    blob = json.dumps({"args": plain, "torch": torch_version, "arch": arch}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def folder_of(plain: dict[str, Any], torch_version: str, arch: str, compile_only: bool = False) -> str:
    return f"{plain['name']}-{build_key(plain, torch_version, arch)[:16]}{'-compile-only' if compile_only else ''}"


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


def _callers(display: Callable[[Path], str]) -> tuple[str, list[Path]]:
    """'file:line' of the load_inline call, and every calling file outside torch and the harness."""
    files: list[Path] = []
    where = ""
    for frame in inspect.stack(context=0)[2:]:
        path = Path(frame.filename)
        if frame.filename.startswith("<") or any(part in path.parts for part in ("torch", "importlib")) \
                or path.resolve().parent.parent == Path(__file__).resolve().parent.parent:
            continue
        if not where:
            where = f"{display(path)}:{frame.lineno}"
        files.append(path.resolve())
    return where or "load_inline call", files


def _missing_argument(exc: TypeError) -> str | None:
    m = re.search(r"missing a required argument: '(\w+)'", str(exc))
    return m.group(1) if m else None


def install_hook(cache_root: Path, arch: str, has_cuda: bool, on_build: Callable[[dict], None],
                 compile_only: bool = False, display: Callable[[Path], str] = str,
                 wrap: Callable[[Any, str], Any] | None = None, prebuilt: dict[str, dict] | None = None,
                 record: Callable[[dict], None] | None = None) -> None:
    """`record` (a build step, and compile-only's): each call not in `prebuilt` is recorded as a
    recipe (its event) and answered with a Recorded stand-in; nothing is compiled. `prebuilt` maps
    a build folder's name to {"copy": the folder where the lane put its library, "from": the
    cache's folder}: that library is imported as it is (no ninja, nothing written; the build
    record names the cache's folder). Any other call builds under `cache_root` (the worker's own
    folder). `wrap(module, name)`, when given, replaces each loaded extension module (diagnosis
    runs record the calls into it)."""
    import torch
    import torch.utils.cpp_extension as cpp_ext

    original = cpp_ext.load_inline
    signature = inspect.signature(original)

    def load_inline(*args: Any, **kwargs: Any):
        where, callers = _callers(display)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            if _missing_argument(exc) == "cpp_sources":
                raise InlineMisuse(where, [m.message for m in check_call(None, None, None)]) from None
            raise InlineMisuse(where, [f"{exc} (load_inline takes {', '.join(signature.parameters)})"]) from None
        bound.apply_defaults()
        params = dict(bound.arguments)
        name = params["name"]
        misuse = check_call(params.get("cpp_sources"), params.get("cuda_sources"), params.get("functions"))
        if misuse:
            raise InlineMisuse(where, [m.message for m in misuse])
        # load_inline inserts its #include lines into the lists it is given: pass copies
        params["cpp_sources"] = as_list(params["cpp_sources"])
        params["cuda_sources"] = as_list(params.get("cuda_sources")) or None
        if params.get("cuda_sources"):
            if compile_only and not find_nvcc():
                raise NeedsCuda(f"extension '{name}' has CUDA sources and this machine has no nvcc to compile them")
            if not compile_only and not has_cuda:
                raise NeedsCuda(f"extension '{name}' has CUDA sources and this run has no CUDA device")
        try:
            plain = plain_params(params)
        except TypeError as exc:
            raise InlineMisuse(where, [str(exc)]) from None
        key = build_key(plain, torch.__version__, arch)
        folder = folder_of(plain, torch.__version__, arch, compile_only)
        staged = (prebuilt or {}).get(folder)
        if staged:
            on_build({"event": "build_start", "name": name, "dir": staged["from"], "key": key, "cached": True})
            module = for_solution(cpp_ext._import_module_from_library, name, staged["copy"],
                                  params.get("is_python_module", True))
            log_path = Path(staged["copy"]) / LOG_NAME
            log = log_path.read_text(errors="replace") if log_path.exists() else ""
            on_build({"event": "build_end", "name": name, "dir": staged["from"], "key": key, "cached": True,
                      "ok": True, "seconds": 0.0, "log": log})
            return wrap(module, name) if wrap else module
        if record is not None:
            record({"name": name, "folder": folder, "key": key, "params": plain, "where": where,
                    "callers": [str(c) for c in callers], "compile_only": compile_only})
            return Recorded(name)
        return _build_here(original, params, Path(cache_root) / folder, key, callers, display, on_build, wrap)

    cpp_ext.load_inline = load_inline


def _build_here(original, params: dict[str, Any], build_dir: Path, key: str, callers: list[Path],
                display: Callable[[Path], str], on_build: Callable[[dict], None], wrap) -> Any:
    """torch's load_inline in `build_dir`, the compiler's output in its log, an error mapped back
    to the solution's line (BuildError)."""
    name = params["name"]
    layout = Layout.of(params["cpp_sources"], params["cuda_sources"], bool(params.get("no_implicit_headers")))
    build_dir.mkdir(parents=True, exist_ok=True)
    log_path = build_dir / LOG_NAME
    was_built = any(build_dir.glob(f"{name}*.so")) and log_path.exists()
    previous_log = log_path.read_text(errors="replace") if was_built else ""
    params = {**params, "build_directory": str(build_dir), "verbose": True}
    start = time.monotonic()
    info = {"name": name, "dir": str(build_dir), "key": key, "cached": was_built}
    on_build({**info, "event": "build_start"})
    fresh_log = build_dir / "harness_build.current.log"
    try:
        with _capture_fds(fresh_log):
            module = for_solution(original, **params)
    except Exception as exc:
        log = fresh_log.read_text(errors="replace")
        if str(exc) and str(exc) not in log:
            log += f"\n{type(exc).__name__}: {exc}\n"
        on_build({**info, "event": "build_end", "ok": False, "seconds": time.monotonic() - start, "log": log})
        if "Error building extension" in str(exc) or isinstance(exc, (OSError, ImportError)) and "undefined symbol" in str(exc):
            site = describe_build_error(log, layout, candidate_files(callers), display)
            raise BuildError(name, log, str(build_dir), site) from None
        raise
    log = fresh_log.read_text(errors="replace")
    if was_built and "no work to do" in log:
        log = previous_log
    else:
        log_path.write_text(log)
    on_build({**info, "event": "build_end", "ok": True, "seconds": time.monotonic() - start, "log": log})
    return wrap(module, name) if wrap else module
