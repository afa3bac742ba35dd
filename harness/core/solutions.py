"""Solution discovery and pairing. The trusted side never imports a solution: it only reads
its text (hash, AST check for ModelNew). Only harness/run/worker.py executes solution code.

Layout: solutions/<family>/<problem id>/<name>.py, each defining ModelNew. A solution written for
some run precisions or devices only says so with a module-level literal, read here without
running the file:

    PRECISIONS = ("bf16",)    # paired only in runs with --precision bf16
    DEVICES = ("cuda",)       # skipped, unrun, in runs on another device ("needs a CUDA device")

A solution without them is paired in every precision and run on every device (KernelBench's
solutions declare neither). DEVICES is for a solution that could run elsewhere but is not meant
to: a CUDA run's algebra in plain PyTorch ops, whose problem is too large for a CPU gate, say.
"""
from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from .. import REPO_ROOT
from .errors import BadInput
from .precision import PRECISIONS
from .problems import Problem, _display, file_sha256

SOLUTIONS_ROOT = REPO_ROOT / "solutions"


@dataclass(frozen=True)
class Solution:
    name: str
    path: Path
    sha256: str
    sources_sha256: str = ""   # the file plus the helpers it may load (see helper_files)
    precisions: tuple[str, ...] = ()  # the run precisions it is written for (PRECISIONS); () = any
    devices: tuple[str, ...] = ()     # the devices it is written for (DEVICES: cpu, cuda); () = any
    kind: str = ""             # "reference": the problem's own Model as its solution (--solution reference, A/A)

    def to_dict(self) -> dict:
        d = {"name": self.name, "path": _display(self.path), "sha256": self.sha256,
             "sources_sha256": self.sources_sha256}
        if self.precisions:
            d["precisions"] = list(self.precisions)
        if self.devices:
            d["devices"] = list(self.devices)
        if self.kind:
            d["kind"] = self.kind
        return d

    def supports(self, precision: str) -> bool:
        return not self.precisions or precision in self.precisions

    def off_device(self, device: str) -> str:
        """Why this run's device is not one the file declares (DEVICES), else ""."""
        if not self.devices or device in self.devices:
            return ""
        declared = "DEVICES = (" + ", ".join(repr(d) for d in self.devices) + ",)"
        need = "needs a CUDA device: " if "cuda" in self.devices else ""
        return f"{need}the file declares {declared}, and this run is on the {device}: not run"


SOLUTION_DEVICES = ("cpu", "cuda")


def _declared(path: Path, name: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The file's module-level `NAME = (...)` literal; () when it has none (or does not parse: the
    worker reports that). A value that is not a literal tuple or list of `allowed` is bad input
    naming the file and line."""
    try:
        tree = ast.parse(Path(path).read_text(), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return ()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                value = None
            if not isinstance(value, (tuple, list)) or not value or not all(v in allowed for v in value):
                raise BadInput(f"{_display(Path(path))}:{node.lineno}",
                               f"{name} must be a literal tuple of {', '.join(allowed)}, got "
                               f"{ast.get_source_segment(Path(path).read_text(), node.value)}")
            return tuple(value)
    return ()


def declared_precisions(path: Path) -> tuple[str, ...]:
    """The file's `PRECISIONS = (...)` (the run precisions it is written for)."""
    return _declared(path, "PRECISIONS", PRECISIONS)


def declared_devices(path: Path) -> tuple[str, ...]:
    """The file's `DEVICES = (...)` (the devices it is written for)."""
    return _declared(path, "DEVICES", SOLUTION_DEVICES)


def helper_files(path: Path) -> list[Path]:
    """Files a solution may load besides itself: entries starting with '_' in its own folder and
    the folder above, and everything inside such '_' folders (e.g. conv_transpose2d/_shared/).
    A change in any of them makes a recorded result stale for --resume."""
    found: list[Path] = []
    for root in dict.fromkeys([path.parent, path.parent.parent]):
        try:
            children = sorted(root.iterdir())
        except OSError:
            continue
        for child in children:
            if not child.name.startswith("_") or child.name == "__pycache__":
                continue
            if child.is_file():
                found.append(child)
            elif child.is_dir():
                found += sorted(f for f in child.rglob("*")
                                if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc")
    return found


def sources_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    for f in [path] + [h for h in helper_files(path) if h != path]:
        digest.update(str(f.name).encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Pair:
    problem: Problem
    solution: Solution


def solution_from_path(path: Path, kind: str = "") -> Solution:
    path = Path(path).resolve()
    return Solution(name=path.stem, path=path, sha256=file_sha256(path), sources_sha256=sources_sha256(path),
                    precisions=declared_precisions(path), devices=declared_devices(path), kind=kind)


REFERENCE = "reference"   # --solution reference: each problem's own Model as its solution
REFERENCE_SHIM = (
    '"""The reference as its own solution (run_eval.py --solution reference): an A/A comparison.\n'
    'Problem: {path} (sha256 {sha256})."""\n'
    "import importlib.util as _util\n\n"
    '_spec = _util.spec_from_file_location("kb_reference_model", {path!r})\n'
    "_module = _util.module_from_spec(_spec)\n"
    "_spec.loader.exec_module(_module)\n"
    "ModelNew = _module.Model\n")


def reference_solution(problem: Problem, folder: Path) -> Solution:
    """The problem's own Model as a solution (an A/A pair): a file under `folder` that loads the
    problem file anew (another module, another class) and names its Model ModelNew. Its speedup
    is against PyTorch's defaults whatever its class: it is that code."""
    path = Path(folder) / problem.id / f"{REFERENCE}.py"
    text = REFERENCE_SHIM.format(path=str(problem.path), sha256=problem.sha256)
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return solution_from_path(path, kind=REFERENCE)


def for_problem(problem: Problem, root: Path = SOLUTIONS_ROOT) -> list[Solution]:
    folder = Path(root) / problem.family / problem.id
    return [solution_from_path(p) for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]


def solution_files(paths: list[str], root: Path = SOLUTIONS_ROOT) -> list[Path]:
    """Solution files named on a command line (files, or folders searched recursively); all of
    the repository's when none is named. Files and folders starting with '_' are helpers."""
    def under(folder: Path) -> list[Path]:
        return sorted(p for p in folder.rglob("*.py")
                      if not any(part.startswith("_") for part in p.relative_to(folder).parts))
    if not paths:
        return under(Path(root))
    files: list[Path] = []
    for spec in paths:
        path = Path(spec)
        if path.is_dir():
            files += under(path)
        elif path.is_file():
            files.append(path)
        else:
            raise BadInput(spec, "no such solution file or folder")
    return files


def problem_for(path: Path, problems: list[Problem], root: Path = SOLUTIONS_ROOT) -> Problem | None:
    """The problem a solution file belongs to, from its place under solutions/<family>/<problem>/."""
    owner = _problem_of(path, root)
    return next((p for p in problems if owner and (p.family, p.id) == owner), None)


def _problem_of(path: Path, root: Path) -> tuple[str, str] | None:
    """(family, problem id) when the path lies in solutions/<family>/<problem>/."""
    try:
        rel = Path(path).resolve().relative_to(Path(root).resolve())
    except ValueError:
        return None
    return (rel.parts[0], rel.parts[1]) if len(rel.parts) == 3 else None


def top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """Names bound at module level, and whether a star import makes the set incomplete."""
    names: set[str] = set()
    star = False
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    star = True
                else:
                    names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            # conservative: definitions inside top-level if/try/with blocks count
            inner = ast.Module(body=list(ast.iter_child_nodes(node)), type_ignores=[])
            inner.body = [n for n in inner.body if isinstance(n, ast.stmt)]
            sub_names, sub_star = top_level_names(inner)
            names |= sub_names
            star = star or sub_star
    return names, star


def problem_names_used(solution_path: Path, problem_path: Path) -> list[str]:
    """The problem's module-level names a solution uses without binding them itself (KernelBench
    runs both in one namespace: harness/core/problems.py namespace_of), read from the two files' syntax.
    [] where either does not parse."""
    import builtins
    try:
        solution = ast.parse(Path(solution_path).read_text())
        problem = ast.parse(Path(problem_path).read_text())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    offered, _ = top_level_names(problem)
    loaded, bound = set(), set(top_level_names(solution)[0])
    for node in ast.walk(solution):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return sorted((loaded - bound - set(dir(builtins))) & offered)


def check_static(solution: Solution) -> None:
    """BadInput when the file cannot be read or visibly defines no ModelNew.

    A file that does not parse is left to the worker, which reports a load_error with the line.
    """
    where = _display(solution.path)
    try:
        text = solution.path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(where, f"cannot read solution file: {exc}") from None
    try:
        tree = ast.parse(text, filename=str(solution.path))
    except SyntaxError:
        return
    names, star = top_level_names(tree)
    if "ModelNew" not in names and not star:
        raise BadInput(where, "solution defines no ModelNew (it must define class ModelNew, a drop-in for the problem's Model)")


def select_pairs(problems: list[Problem], spec: str | None, problems_given: bool,
                 all_problems: list[Problem], root: Path = SOLUTIONS_ROOT, precision: str = "fp32",
                 reference_dir: Path | None = None) -> list[Pair]:
    """Resolve --solution against the selected problems, in a run of `precision`: a solution
    declaring other PRECISIONS is left out, or bad input where it is the one named. `reference`
    pairs each problem with its own Model (reference_solution, written under `reference_dir`)."""
    if spec == REFERENCE and reference_dir is not None:
        return [Pair(p, reference_solution(p, reference_dir)) for p in problems]
    if spec is not None and (spec.endswith(".py") or Path(spec).is_file()):
        path = Path(spec)
        if not path.is_file():
            raise BadInput(spec, "solution file not found")
        solution = solution_from_path(path)
        if problems_given:
            targets = problems
        else:
            owner = problem_for(path, all_problems, root)
            targets = [owner] if owner else []
            if not targets:
                raise BadInput(spec, "cannot tell which problem this solution is for: give --problem "
                                     "(or place it under solutions/<family>/<problem>/)")
        if not solution.supports(precision):
            raise BadInput(spec, f"written for {'/'.join(solution.precisions)} (PRECISIONS in the file), not for "
                                 f"this run's {precision}: run with --precision {solution.precisions[0]}")
        pairs = [Pair(p, solution) for p in targets]
    else:
        named = [Pair(p, s) for p in problems for s in for_problem(p, root) if spec is None or s.name == spec]
        pairs = [pair for pair in named if pair.solution.supports(precision)]
        if not pairs:
            what = f"named '{spec}' " if spec else ""
            ids = ", ".join(p.id for p in problems[:5]) + (" ..." if len(problems) > 5 else "")
            if named:
                other = sorted({q for pair in named for q in pair.solution.precisions})
                raise BadInput("--solution", f"the solutions {what}for {ids} are written for {'/'.join(other)} "
                                             f"(PRECISIONS), not for this run's {precision}: run with "
                                             f"--precision {other[0]}")
            raise BadInput("--solution", f"no solution {what}found for {ids} under {_display(Path(root))}/")
    for pair in pairs:
        check_static(pair.solution)
    return pairs
