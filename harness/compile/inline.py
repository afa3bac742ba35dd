"""What the harness knows about torch.utils.cpp_extension.load_inline, shared by the build hook
(harness/compile/build.py), lint (harness/compile/lint.py) and compile-only builds.

* `check_call`: misuse found before compiling (cpp_sources missing, `functions` naming something
  that cpp_sources does not declare, or that no source defines).
* `Layout` / `origin`: map a line of the generated main.cpp / cuda.cu back to the solution file
  (or the .cu file it read) where that source line lives.
* `describe_build_error`: the first compiler error of a log, with its location mapped back and a
  hint for well-known mistakes.

Nothing here imports or runs solution code.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

# load_inline's parameters (torch 2.11-2.13); used when torch's own signature is not at hand.
PARAMS = ("name", "cpp_sources", "cuda_sources", "sycl_sources", "functions", "extra_cflags",
          "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths",
          "build_directory", "verbose", "with_cuda", "with_sycl", "is_python_module",
          "with_pytorch_error_handling", "keep_intermediates", "use_pch", "no_implicit_headers")
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp")

_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_STRING_RE = re.compile(r'"(?:\\.|[^"\\\n])*"')


def as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def function_names(functions: Any) -> list[str]:
    if functions is None:
        return []
    if isinstance(functions, str):
        return [functions]
    return list(functions)  # list, or dict name -> docstring


def strip_code(text: str) -> str:
    """C/C++ text without comments and string literals (kept line for line)."""
    text = _COMMENT_RE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _STRING_RE.sub('""', text)


def _mentions(name: str, code: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", code) is not None


def _definition(name: str, code: str) -> str | None:
    """`ret name(args)` of a definition of `name` in C++/CUDA code, for a suggested declaration."""
    m = re.search(rf"(?m)^[ \t]*((?:[\w:<>,]+[\s*&]+)+){re.escape(name)}\s*\(([^)]*)\)\s*\{{", code)
    if not m:
        return None
    ret = " ".join(w for w in m.group(1).split() if w not in ("static", "inline", "__host__"))
    return f"{ret} {name}({' '.join(m.group(2).split())});"


@dataclass(frozen=True)
class Misuse:
    message: str


def check_call(cpp_sources: Any, cuda_sources: Any, functions: Any) -> list[Misuse]:
    """Misuse visible before compiling. cpp_sources is required by load_inline; every name in
    `functions` gets a binding generated in the C++ file, so cpp_sources must declare it."""
    if cpp_sources is None:
        return [Misuse("load_inline is called without cpp_sources, which it requires: pass the C++ "
                       "declarations of the functions to bind, e.g. cpp_sources=\"torch::Tensor "
                       "forward(torch::Tensor x);\" (the CUDA code goes in cuda_sources)")]
    if functions is not None and not isinstance(functions, (str, list, tuple, dict)):
        return [Misuse(f"functions must be a list of names (or a dict name -> docstring), "
                       f"got {type(functions).__name__}")]
    cpp = strip_code("\n".join(as_list(cpp_sources)))
    cuda = strip_code("\n".join(as_list(cuda_sources)))
    local_include = re.search(r'#\s*include\s*"', "\n".join(as_list(cpp_sources))) is not None
    problems: list[Misuse] = []
    for name in function_names(functions):
        if _mentions(name, cpp) or local_include:
            continue
        if _mentions(name, cuda):
            decl = _definition(name, cuda) or f"torch::Tensor {name}(torch::Tensor x);"
            where = "cpp_sources is empty" if not cpp.strip() else f"cpp_sources does not declare '{name}'"
            problems.append(Misuse(
                f"functions names '{name}', which is defined only in cuda_sources, and {where}: the "
                f"bindings are generated into the C++ file (main.cpp), which cannot see CUDA-only "
                f"definitions. Declare it in cpp_sources: {decl}"))
        else:
            problems.append(Misuse(f"functions names '{name}', which no source defines or declares "
                                   f"(check the spelling, or add its definition)"))
    return problems


# -- generated files -> source strings ------------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    kind: str          # "cpp_sources" or "cuda_sources"
    index: int         # which string of that list
    first_line: int    # its first line in the generated file (1-based)
    text: str


@dataclass(frozen=True)
class Layout:
    """Where each source string lies in the generated main.cpp and cuda.cu (load_inline joins the
    strings with newlines after its implicit #include lines and appends the bindings)."""
    files: dict[str, list[Segment]]

    @classmethod
    def of(cls, cpp_sources: Any, cuda_sources: Any, no_implicit_headers: bool = False) -> "Layout":
        files: dict[str, list[Segment]] = {}
        for file_name, kind, sources, implicit in (("main.cpp", "cpp_sources", cpp_sources, 1),
                                                   ("cuda.cu", "cuda_sources", cuda_sources, 3)):
            line = 1 + (0 if no_implicit_headers else implicit)
            segments = []
            for index, text in enumerate(as_list(sources)):
                segments.append(Segment(kind, index, line, text))
                line += text.count("\n") + 1
            files[file_name] = segments
        return cls(files)

    def locate(self, file_name: str, line: int) -> tuple[Segment, int] | None:
        """(segment, 1-based line within it) for a line of a generated file; None for the
        implicit includes and the generated bindings."""
        for seg in self.files.get(Path(file_name).name, []):
            if seg.first_line <= line < seg.first_line + seg.text.count("\n") + 1:
                return seg, line - seg.first_line + 1
        return None


def _python_literal_origin(path: Path, text: str, line_in: int, tree_cache: dict) -> int | None:
    if path not in tree_cache:
        try:
            tree_cache[path] = ast.parse(path.read_text())
        except (SyntaxError, OSError, UnicodeDecodeError):
            tree_cache[path] = None
    tree = tree_cache[path]
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value == text:
            return node.lineno + line_in - 1
    return None


def origin(text: str, line_in: int, candidates: Iterable[Path]) -> tuple[Path, int] | None:
    """The file and line where line `line_in` of source string `text` is written: a Python
    string literal equal to it, a source file that contains it verbatim, or else the one line
    among the candidates with the same content."""
    candidates = [Path(c) for c in dict.fromkeys(candidates)]
    trees: dict = {}
    wanted = text.splitlines()[line_in - 1].strip() if 0 < line_in <= len(text.splitlines()) else ""
    for path in candidates:
        if path.suffix == ".py":
            found = _python_literal_origin(path, text, line_in, trees)
            if found is not None:
                return path, found
    for path in candidates:
        if path.suffix in SOURCE_SUFFIXES:
            try:
                content = path.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            pos = content.find(text) if text.strip() else -1
            if pos >= 0:
                return path, content[:pos].count("\n") + line_in
    if not wanted:
        return None
    hits = []
    for path in candidates:
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        hits += [(path, i + 1) for i, content in enumerate(lines) if content.strip() == wanted]
    return hits[0] if len(hits) == 1 else None


def candidate_files(callers: Iterable[Path]) -> list[Path]:
    """Files that may hold the sources: the calling Python files, and C/C++/CUDA files in their
    folders and one level below."""
    found: list[Path] = []
    for caller in callers:
        caller = Path(caller)
        found.append(caller)
        folder = caller.parent
        for pattern in ("*", "*/*"):
            found += sorted(p for p in folder.glob(pattern) if p.suffix in SOURCE_SUFFIXES and p.is_file())
    return list(dict.fromkeys(found))


# -- compiler logs -----------------------------------------------------------------------------------
# gcc/clang: file:line:col: error: msg     nvcc: file(line): error: msg
_GCC_RE = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?:fatal )?error:\s*(?P<msg>.*)$")
_NVCC_RE = re.compile(r"^(?P<file>[^\s(][^(]*?)\((?P<line>\d+)\):\s*(?:catastrophic )?error:?\s*(?P<msg>.*)$")
_REQUIRED_RE = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:\d+:)?\s+required from")
_NVCC_INST_RE = re.compile(r"at line (?P<line>\d+) of (?P<file>\S+)")
_LINKER_RE = re.compile(r"(undefined reference to|undefined symbol:?)\s*(?P<sym>\S+)")
GENERATED = ("main.cpp", "cuda.cu")

HINTS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"DeprecatedTypeProperties"),
     "Tensor::type() is deprecated and no longer converts to a ScalarType: use x.scalar_type(), "
     "e.g. AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"name\", ...)"),
    (re.compile(r"PackedTensorAccessor[^\n]*?has no member (?:named )?\W*(\w+)"),
     "a PackedTensorAccessor has only size(i), stride(i), data() and operator[]: it has no {0}(); "
     "take sizes and numel() from the tensor before making the accessor"),
    (re.compile(r"RestrictPtrTraits\W+is not a member of\W+torch|namespace \"torch\" has no member \"RestrictPtrTraits\""),
     "RestrictPtrTraits lives in namespace at: use at::RestrictPtrTraits"),
    (re.compile(r"has no member (?:named )?\W?data\W.*Tensor|\bdata<"),
     "Tensor::data<T>() was removed: use data_ptr<T>()"),
    (re.compile(r"THC/THC\.h"),
     "THC was removed from PyTorch: use ATen/cuda/CUDAContext.h and c10/cuda/CUDAException.h"),
    (re.compile(r"undefined (?:reference to|symbol)"),
     "a function is declared but not defined with that exact signature and namespace (a C++ "
     "declaration must match its CUDA definition, including const and reference qualifiers)"),
)


@dataclass(frozen=True)
class ErrorSite:
    text: str                  # the first compiler error line, trimmed
    file: str | None           # file as the compiler printed it
    line: int | None
    mapped: str | None         # "solution.py:42" when the location maps back
    generated: str | None      # "cuda.cu:45" (the generated file and line), when it was one
    source: str | None         # "cuda_sources[0] line 12"
    hint: str | None

    def message(self, extension: str) -> str:
        where = self.mapped or (f"{self.generated}" if self.generated else None)
        parts = [f"{where}: " if where else "", self.text]
        extra = []
        if self.mapped and self.generated:
            extra.append(f"{self.source} of extension '{extension}', compiled as {self.generated}")
        else:
            extra.append(f"extension '{extension}'")
        msg = "".join(parts) + f" ({'; '.join(extra)})"
        if self.hint:
            msg += f". Hint: {self.hint}"
        return msg


def _trim(text: str, limit: int = 300) -> str:
    """One line; long template argument lists collapsed to <...> (innermost first)."""
    text = " ".join(text.split())
    while len(text) > 160:
        marked = text.replace("<...>", "\0")
        collapsed = re.sub(r"<[^<>]*>", "\0", marked)
        if collapsed == marked:
            break
        text = collapsed.replace("\0", "<...>")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_error(log: str) -> tuple[int, str, str | None, int | None] | None:
    """(log line index, message, file, line) of the first compiler or linker error."""
    for i, raw in enumerate(log.splitlines()):
        s = raw.strip()
        for rx in (_GCC_RE, _NVCC_RE):
            m = rx.match(s)
            if m:
                return i, f"error: {m.group('msg')}", m.group("file"), int(m.group("line"))
        m = _LINKER_RE.search(s)
        if m:
            return i, s, None, None
    return None


def _generated_site(log_lines: list[str], index: int, file: str | None, line: int | None) -> tuple[str, int] | None:
    """The generated-file location of an error: its own when it is in main.cpp/cuda.cu, else the
    nearest 'required from' / 'at line N of' reference to one (template instantiations)."""
    if file and Path(file).name in GENERATED:
        return Path(file).name, line
    window = log_lines[max(0, index - 30): index + 30]
    near = sorted(range(len(window)), key=lambda j: abs(j - min(index, 30)))
    for j in near:
        s = window[j].strip()
        for rx in (_REQUIRED_RE, _NVCC_INST_RE, _GCC_RE, _NVCC_RE):
            m = rx.search(s) if rx is _NVCC_INST_RE else rx.match(s)
            if m and Path(m.group("file")).name in GENERATED:
                return Path(m.group("file")).name, int(m.group("line"))
    return None


def hint_for(text: str) -> str | None:
    for rx, hint in HINTS:
        m = rx.search(text)
        if m:
            return hint.format(*m.groups()) if m.groups() else hint
    return None


def describe_build_error(log: str, layout: Layout | None, candidates: Iterable[Path],
                         display=str) -> ErrorSite | None:
    found = first_error(log)
    if found is None:
        return None
    index, text, file, line = found
    lines = log.splitlines()
    context = "\n".join(lines[max(0, index - 3): index + 6])
    site = _generated_site(lines, index, file, line)
    mapped = generated = source = None
    if site:
        generated = f"{site[0]}:{site[1]}"
        hit = layout.locate(*site) if layout else None
        if hit:
            segment, line_in = hit
            source = f"{segment.kind}[{segment.index}] line {line_in}"
            where = origin(segment.text, line_in, candidates)
            if where:
                mapped = f"{display(where[0])}:{where[1]}"
        elif layout and site[0] == "main.cpp":
            source = "the generated bindings (functions=...)"
    return ErrorSite(_trim(text), file, line, mapped, generated, source, hint_for(context))
