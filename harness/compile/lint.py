"""Static checks of solution files: the AST and the load_inline source strings, no import of the
solution, no GPU, seconds per file.

  error    ModelNew missing; the constructor cannot take the problem's get_init_inputs();
           load_inline misuse (unknown keyword, cpp_sources missing, `functions` not declared);
           a syntax error
  warning  forward calls a torch convolution itself (its speed would be PyTorch's); the file
           assigns to attributes of torch or of the harness, or imports the harness
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .inline import PARAMS, check_call
from ..core.problems import Problem, _display, load_problem
from ..core.solutions import top_level_names

CONV_FUNCTIONS = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
                  "convolution", "_convolution", "conv_tbc", "cudnn_convolution", "cudnn_convolution_transpose",
                  "mkldnn_convolution", "_conv_forward"}
CONV_MODULES = {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
                "LazyConv2d", "LazyConvTranspose2d"}
_UNKNOWN = object()


@dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    severity: str   # "error" or "warning"
    check: str
    message: str

    def __str__(self) -> str:
        return f"{_display(self.path)}:{self.line}: {self.severity}: {self.message} [{self.check}]"


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted module/attribute path, for names imported from torch or the harness."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    names[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return {k: v for k, v in names.items() if v.split(".")[0] in ("torch", "harness")}


def _dotted(node: ast.AST, aliases: dict[str, str] | None = None) -> str | None:
    """'torch.nn.functional.conv2d' for F.conv2d when F is an alias (None when the root is not
    one); with aliases=None, the dotted name as written ('nn.Module')."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    if aliases is None:
        return ".".join([node.id] + parts[::-1])
    if node.id in aliases:
        return ".".join([aliases[node.id]] + parts[::-1])
    return None


def _module_strings(tree: ast.Module) -> dict[str, Any]:
    """Module-level names bound to statically known strings (or lists of them)."""
    values: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = _static(node.value, values)
    return values


def _static(node: ast.AST | None, env: dict[str, Any]) -> Any:
    """The value of a string / list-of-strings expression, or _UNKNOWN."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, type(None))):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id, _UNKNOWN)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_static(e, env) for e in node.elts]
        return _UNKNOWN if any(i is _UNKNOWN for i in items) else list(items)
    if isinstance(node, ast.Dict):
        keys = [_static(k, env) for k in node.keys]
        return _UNKNOWN if any(k is _UNKNOWN or not isinstance(k, str) for k in keys) else {k: "" for k in keys}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _static(node.left, env), _static(node.right, env)
        if isinstance(left, str) and isinstance(right, str) or isinstance(left, list) and isinstance(right, list):
            return left + right
    return _UNKNOWN


def _is_load_inline(call: ast.Call, aliases: dict[str, str]) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "load_inline" or aliases.get(func.id, "").endswith(".load_inline")
    return isinstance(func, ast.Attribute) and func.attr == "load_inline"


def _check_load_inline(path: Path, call: ast.Call, env: dict[str, Any]) -> list[Finding]:
    found = []

    def error(message: str) -> None:
        found.append(Finding(path, call.lineno, "error", "load-inline", message))

    given: dict[str, ast.AST] = dict(zip(PARAMS, call.args))
    if len(call.args) > len(PARAMS):
        error(f"load_inline takes at most {len(PARAMS)} positional arguments, got {len(call.args)}")
    for kw in call.keywords:
        if kw.arg is None:
            return found  # **kwargs: not checkable statically
        if kw.arg not in PARAMS:
            error(f"load_inline has no parameter '{kw.arg}' (it takes {', '.join(PARAMS)})")
        given[kw.arg] = kw.value
    if "name" not in given:
        error("load_inline needs name= (the extension's module name)")
    if "cpp_sources" not in given:
        found += [Finding(path, call.lineno, "error", "load-inline", m.message) for m in check_call(None, None, None)]
        return found
    values = {k: _static(given.get(k), env) for k in ("cpp_sources", "cuda_sources", "functions")}
    if all(v is not _UNKNOWN for v in values.values()):
        found += [Finding(path, call.lineno, "error", "load-inline", m.message)
                  for m in check_call(values["cpp_sources"], values["cuda_sources"], values["functions"])]
    return found


def _signature_problem(init: ast.FunctionDef | None, count: int) -> str | None:
    """Why `count` positional arguments do not bind to `init` (None if they do)."""
    if init is None:
        return None if count == 0 else f"ModelNew defines no __init__, so it takes no arguments, but get_init_inputs() gives {count}"
    args = init.args
    positional = args.posonlyargs + args.args
    params = positional[1:] if positional else []  # drop self
    required = len(params) - len(args.defaults)
    missing_kwonly = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if count < required:
        names = ", ".join(a.arg for a in params[count:required])
        return f"ModelNew.__init__ needs {required} positional arguments; get_init_inputs() gives {count} (missing {names})"
    if count > len(params) and args.vararg is None:
        return f"ModelNew.__init__ takes {len(params)} positional arguments; get_init_inputs() gives {count}"
    if missing_kwonly:
        return f"ModelNew.__init__ has required keyword-only arguments ({', '.join(missing_kwonly)}) that get_init_inputs() cannot give"
    return None


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _class_chain(tree: ast.Module, name: str) -> list[ast.ClassDef]:
    """ModelNew and its base classes defined in the same file."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    chain, seen = [], set()
    while name in classes and name not in seen:
        seen.add(name)
        cls = classes[name]
        chain.append(cls)
        bases = [b.id for b in cls.bases if isinstance(b, ast.Name)]
        name = bases[0] if bases else ""
    return chain


def _check_constructor(path: Path, tree: ast.Module, init_inputs: list) -> list[Finding]:
    chain = _class_chain(tree, "ModelNew")
    if not chain:
        return []  # ModelNew is imported or made by a factory: not visible statically
    for cls in chain:
        if "__init__" in _methods(cls):
            problem = _signature_problem(_methods(cls)["__init__"], len(init_inputs))
            line = _methods(cls)["__init__"].lineno
            break
    else:
        last = chain[-1]
        external = [b for b in last.bases if not (_dotted(b) or "").endswith("Module")]
        if external:
            return []  # inherits a constructor from another module
        problem, line = _signature_problem(None, len(init_inputs)), chain[0].lineno
    return [Finding(path, line, "error", "constructor", problem)] if problem else []


def _check_forward(path: Path, tree: ast.Module, aliases: dict[str, str]) -> list[Finding]:
    found = []
    for cls in _class_chain(tree, "ModelNew"):
        methods = _methods(cls)
        conv_attrs = set()
        for node in ast.walk(methods.get("__init__", ast.Module(body=[], type_ignores=[]))):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                callee = _dotted(node.value.func, aliases) or _dotted(node.value.func) or ""
                if callee.rsplit(".", 1)[-1] in CONV_MODULES:
                    conv_attrs |= {t.attr for t in node.targets if isinstance(t, ast.Attribute)}
        for name, method in methods.items():
            if name == "__init__":
                continue
            for node in ast.walk(method):
                if not isinstance(node, ast.Call):
                    continue
                dotted = _dotted(node.func, aliases) or ""
                target = dotted.rsplit(".", 1)[-1]
                is_self_conv = (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                                and node.func.value.id == "self" and node.func.attr in conv_attrs)
                if dotted.startswith("torch.") and (target in CONV_FUNCTIONS or ".ops.aten." in dotted
                                                    and "conv" in target):
                    found.append(Finding(path, node.lineno, "warning", "torch-conv",
                                         f"{cls.name}.{name} calls {dotted} itself: the speed measured would be "
                                         f"PyTorch's (flagged library_passthrough at run time)"))
                elif is_self_conv:
                    found.append(Finding(path, node.lineno, "warning", "torch-conv",
                                         f"{cls.name}.{name} calls self.{node.func.attr}, a torch convolution "
                                         f"module: the speed measured would be PyTorch's"))
    return found


def _check_patching(path: Path, tree: ast.Module, aliases: dict[str, str]) -> list[Finding]:
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
                and node.args and _dotted(node.args[0], aliases):
            owner = _dotted(node.args[0], aliases)
            found.append(Finding(path, node.lineno, "warning", "patches-torch",
                                 f"{node.func.id}() on {owner}: a solution must not change torch or the harness "
                                 f"(it would change the reference too)"))
            continue
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute):
                    dotted = _dotted(sub, aliases)
                    if dotted:
                        found.append(Finding(path, node.lineno, "warning", "patches-torch",
                                             f"assigns to {dotted}: a solution must not change torch or the harness "
                                             f"(that changes the reference, or how it is checked or timed)"))
                        break
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m.split(".")[0] == "harness" for m in modules):
                found.append(Finding(path, node.lineno, "warning", "imports-harness",
                                     "imports the harness: a solution must not depend on or touch the evaluator"))
    return found


def lint_file(path: Path, problem: Problem | None) -> list[Finding]:
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return [Finding(path, 0, "error", "read", f"cannot read the file: {exc}")]
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        return [Finding(path, exc.lineno or 0, "error", "syntax", f"syntax error: {exc.msg}")]
    found: list[Finding] = []
    names, star = top_level_names(tree)
    if "ModelNew" not in names and not star:
        found.append(Finding(path, 1, "error", "modelnew", "defines no ModelNew (the drop-in for the problem's Model)"))
    elif problem is not None:
        init_inputs = list(load_problem(problem).get_init_inputs())
        found += _check_constructor(path, tree, init_inputs)
    aliases = _aliases(tree)
    env = _module_strings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_load_inline(node, aliases):
            found += _check_load_inline(path, node, env)
    found += _check_forward(path, tree, aliases)
    found += _check_patching(path, tree, aliases)
    return sorted(found, key=lambda f: (f.line, f.check))
