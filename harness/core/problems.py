"""Problem discovery, selection and loading.

A problem is a KernelBench-format file `problems/<family>/<id>.py` defining a reference
`Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`. Problem files are trusted
(they are the ground truth) and import nothing from the harness.
"""
from __future__ import annotations

import difflib

import hashlib
import importlib.util
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

from .. import REPO_ROOT
from .errors import BadInput

PROBLEMS_ROOT = REPO_ROOT / "problems"
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


@dataclass(frozen=True)
class Problem:
    id: str        # the file stem, e.g. "57_conv_transposed_2D__square_input__square_kernel"
    family: str    # the folder, e.g. "conv_transpose2d"
    path: Path
    sha256: str

    def to_dict(self) -> dict:
        return {"id": self.id, "family": self.family, "path": _display(self.path), "sha256": self.sha256}


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def problem_from_path(path: Path) -> Problem:
    path = Path(path).resolve()
    return Problem(id=path.stem, family=path.parent.name, path=path, sha256=file_sha256(path))


def discover(root: Path = PROBLEMS_ROOT) -> list[Problem]:
    return [problem_from_path(p) for p in sorted(Path(root).glob("*/*.py")) if not p.name.startswith("_")]


def families(root: Path = PROBLEMS_ROOT) -> list[str]:
    return sorted({p.family for p in discover(root)})


def _short_id(stem: str) -> str:
    return stem.split("_", 1)[0]


def order_key(problem_id: str) -> tuple:
    """Problems in the order their numbers give (2 before 23, a name without a number after them)."""
    head = _short_id(problem_id)
    return (0, int(head), problem_id) if head.isdigit() else (1, 0, problem_id)


def select(spec: str | None, root: Path = PROBLEMS_ROOT) -> list[Problem]:
    """Resolve --problem: None (all), a path, a family, family/name, a name, a number or a unique prefix."""
    all_problems = discover(root)
    if spec is None:
        return all_problems
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            raise BadInput(spec, "problem file not found")
        return [problem_from_path(path)]
    pool = all_problems
    name = spec
    if "/" in spec:
        family, name = spec.split("/", 1)
        pool = [p for p in all_problems if p.family == family]
        if not pool:
            raise BadInput("--problem", f"no problem family '{family}' under {_display(Path(root))}/")
        if not name:
            return pool
    elif spec in {p.family for p in all_problems}:
        return [p for p in all_problems if p.family == spec]
    for match in (
        lambda p: p.id == name,
        lambda p: name.isdigit() and _short_id(p.id) == name,
        lambda p: p.id.startswith(name),
    ):
        found = [p for p in pool if match(p)]
        if len(found) == 1:
            return found
        if len(found) > 1:
            names = ", ".join(p.id for p in found[:8])
            raise BadInput("--problem", f"'{spec}' is ambiguous: it matches {names}")
    fams = ", ".join(sorted({p.family for p in all_problems})) or "none"
    close = difflib.get_close_matches(name, [p.id for p in pool] + sorted({p.family for p in all_problems}), n=1,
                                      cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else f" (families: {fams})"
    raise BadInput("--problem", f"'{spec}' matches no problem under {_display(Path(root))}/{hint}")


def namespace_of(module: types.ModuleType | None) -> dict:
    """A copy of a problem module's names, for its solution (KernelBench's eval runs the problem's
    source and then the solution's in one namespace, so solutions use the problem's constants, its
    helpers, even its `torch` and `nn`): a solution that rebinds one changes only its own copy."""
    if module is None:
        return {}
    return {k: v for k, v in vars(module).items() if not (k.startswith("__") and k.endswith("__"))}


def load_module(path: Path, prefix: str = "kb_problem", names: dict | None = None) -> types.ModuleType:
    """Import a Python file under a unique module name, its namespace starting with `names` (a
    solution: its problem's, namespace_of). Exceptions propagate."""
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    mod_name = f"{prefix}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    for key, value in (names or {}).items():
        module.__dict__.setdefault(key, value)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    return module


def exception_location(exc: BaseException, path: Path) -> str:
    """'file:line' of the innermost traceback frame inside `path` (or the SyntaxError position)."""
    path = Path(path).resolve()
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == path:
        return f"{_display(path)}:{exc.lineno}"
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename and Path(frame.filename).resolve() == path:
            line = frame.lineno
    if line is None and isinstance(exc, TypeError):  # a call that never entered its function: its def
        line = _definition_line(path, str(exc))
    return f"{_display(path)}:{line}" if line else _display(path)


def _definition_line(path: Path, message: str) -> int | None:
    """The line of `def NAME` in `path` for a TypeError about calling NAME with the wrong arguments
    ("ModelNew.forward() takes 2 positional arguments but 3 were given"), where its class is there."""
    import ast
    import re
    m = re.match(r"(?:(\w+)\.)?(\w+)\(\) (?:takes|missing|got)", message)
    if not m:
        return None
    owner, name = m.groups()
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and owner in (None, node.name):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    return item.lineno
    return None


def load_problem(problem: Problem) -> types.ModuleType:
    """Import and validate a problem file; any defect is BadInput naming the file."""
    where = _display(problem.path)
    try:
        module = load_module(problem.path)
    except Exception as exc:  # noqa: BLE001 - any failure of a problem file is bad input
        loc = exception_location(exc, problem.path)
        raise BadInput(loc, f"problem file failed to import: {type(exc).__name__}: {exc}") from None
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise BadInput(where, f"problem file lacks {', '.join(missing)} (needs Model, get_inputs, get_init_inputs)")
    for name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, name)):
            raise BadInput(where, f"{name} must be a function")
    return module


def validate(problem: Problem, extra_shapes: list[dict] | None = None, where: str = "") -> None:
    """Check that the problem file loads, get_init_inputs() returns a list (get_inputs() is not
    called here: it may allocate large tensors) and each extra shape overrides existing
    module-level constants (`where`: the config that names them)."""
    module = load_problem(problem)
    for shape in extra_shapes or []:
        unknown = [k for k in shape if not hasattr(module, k)]
        if unknown:
            raise BadInput(where, f"correctness.extra_shapes for {problem.id}: {', '.join(unknown)} "
                                  f"is not a module-level constant of {_display(problem.path)}")
    try:
        value = module.get_init_inputs()
    except Exception as exc:  # noqa: BLE001
        raise BadInput(exception_location(exc, problem.path),
                       f"get_init_inputs() raised {type(exc).__name__}: {exc}") from None
    if not isinstance(value, (list, tuple)):
        raise BadInput(_display(problem.path), f"get_init_inputs() must return a list, got {type(value).__name__}")
    declaration(problem.path, problem.sha256)


# -- what a problem declares of its calls, for the physical floor ---------------------------------
FLOORS_FILE = "floors.yaml"
DECLARED = {"sha256": str, "reads_inputs": bool, "min_flop": int, "why": str}


def declaration(path: Path, sha256: str) -> dict | None:
    """What the problem file at `path` declares of every call at its benchmark shape, from
    floors.yaml beside it (problem files stay byte for byte as published, so the declaration
    lives outside them), or None where it declares nothing:

        <file name>.py:
          sha256: ...         the version of the file the declaration holds for
          reads_inputs: true  a right output depends on every byte of every input tensor
          min_flop: 123       arithmetic that no algorithm meeting the run's class avoids
          why: ...            how those were established

    harness/verdict/checks.py floor turns them into times. Raises BadInput for a malformed file or a
    declaration made for another version of the problem file."""
    import yaml
    path = Path(path)
    file = path.parent / FLOORS_FILE
    if not file.is_file():
        return None
    where = _display(file)
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise BadInput(where, f"not readable YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise BadInput(where, "must map problem file names to their declarations")
    entry = data.get(path.name)
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise BadInput(where, f"{path.name}: a declaration is a mapping ({', '.join(DECLARED)})")
    unknown = sorted(set(entry) - set(DECLARED))
    if unknown:
        raise BadInput(where, f"{path.name}: unknown key {', '.join(unknown)} (known: {', '.join(DECLARED)})")
    for key, kind in DECLARED.items():
        value = entry.get(key)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))
                                  or (kind is int and value <= 0)):
            raise BadInput(where, f"{path.name}: {key} must be {'a positive integer' if kind is int else kind.__name__}, "
                                  f"got {value!r}")
    if not entry.get("sha256"):
        raise BadInput(where, f"{path.name}: no sha256 (the version of the problem file the declaration holds for)")
    if entry["sha256"] != sha256:
        raise BadInput(where, f"{path.name}: declared for another version of the problem file (sha256 "
                              f"{entry['sha256'][:12]}..., the file's is {sha256[:12]}...); declare it again "
                              f"(tools/declare_floors.py) or remove its entry")
    return {"file": where, "reads_inputs": bool(entry.get("reads_inputs", False)),
            **({"min_flop": entry["min_flop"]} if entry.get("min_flop") else {})}


def make_inputs(module: types.ModuleType, seed: int, device, dtype: str | None = None) -> list:
    """Call get_inputs() under `seed` and move tensors to `device`; floating-point tensors are then
    cast to `dtype` (a torch dtype name: a half-precision run) and other tensors (indices, class
    targets) stay as they are. Worker and lane both call this with the same seed on the same
    device, so they get the same inputs.

    On CUDA, get_inputs() runs with the device as torch's default device: its factory calls
    (torch.rand, torch.randn, ...) allocate and draw on the GPU, from the CUDA generator seeded
    here, in milliseconds where the host takes seconds for a 6.4 GB input; same shapes, dtypes and
    distributions, other values than the host's generator would give. A get_inputs() that cannot
    run so (e.g. it calls .numpy()) runs on the host, under the same seed, and its tensors move."""
    import random

    import torch

    def draw(default_device=None):
        random.seed(seed)
        seed_draws(seed)
        if default_device is None:
            return module.get_inputs()
        with torch.device(default_device):
            return module.get_inputs()

    values = None
    if torch.device(device).type == "cuda":
        try:
            values = draw(device)
        except Exception:  # noqa: BLE001 - retried on the host; a real fault raises there too
            values = None
    if values is None:
        values = draw()
    return [cast(v.to(device), dtype) if isinstance(v, torch.Tensor) else v for v in values]


def seed_draws(seed: int) -> None:
    """The generators get_inputs() draws from, seeded as torch.manual_seed(seed) seeds them: the CPU's
    and every CUDA device's (queued until CUDA starts, as torch queues it), so the same values. Not
    torch.manual_seed itself: it also seeds XPU and MTIA, which never start here, by queueing each
    call with the caller's stack formatted (linecache's file checks included), 0.1-0.3 ms a call with
    a worker's stack, where each of a pair's up to 2,000 timed calls on CUDA draws its inputs."""
    import torch
    if torch.cuda._is_compiled() and not torch.cuda._is_in_bad_fork():
        torch.cuda.manual_seed_all(seed)
    torch.default_generator.manual_seed(seed)


def cast(tensor, dtype: str | None):
    """`tensor` in `dtype` where it is floating-point and a dtype is given, else as it is."""
    if dtype is None or not tensor.is_floating_point():
        return tensor
    import torch
    return tensor.to(getattr(torch, dtype))


def construct(cls, init_inputs: list, seed: int, device, call=None, dtype: str | None = None):
    """Matched-seed construction: the same seed before every constructor, then move to device and,
    in a half-precision run, cast the floating-point init inputs, parameters and buffers to `dtype`
    (module.to(dtype) leaves integer buffers alone), as KernelBench does. `call(fn, *args)` makes
    the constructor's calls (the worker passes blame.for_solution for ModelNew, so that what they
    raise is the solution's)."""
    import torch
    call = call or (lambda fn, *a: fn(*a))
    torch.manual_seed(seed)
    args = [cast(v.to(device), dtype) if isinstance(v, torch.Tensor) else v for v in init_inputs]
    model = call(call(cls, *args).to, device)
    return model if dtype is None else call(model.to, getattr(torch, dtype))


def extra_shapes_for(problem: Problem, mapping: dict) -> list[dict]:
    """Extra correctness shapes from the config: keys are a problem id, its number or its family
    (validate() checks that they name module-level constants of the problem)."""
    keys = {problem.id, _short_id(problem.id), problem.family, f"{problem.family}/{problem.id}"}
    return [dict(s) for key, value in mapping.items() if key in keys for s in value]
