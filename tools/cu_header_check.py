"""build.cu_header against torch's own header, on the CPU (nvcc, no GPU). Each solution is compiled
by the harness's compile-only with `build.cu_header` on (harness/compile/compile_only.py: the build
step runs its module sandboxed and records its load_inline calls); then each recipe's cuda.cu, as
load_inline wrote it, is compiled again by its own build.ninja's nvcc command in one folder, once
with the header asked for (`--header small`: its torch/extension.h read as torch/types.h; `lean`:
harness/compile/cu_header_lean's torch/types.h) and once with torch's own, and the two objects are
compared:

- `kernels_same`: the device code (the .nv_fatbin section), byte for byte;
- `functions`: the host functions both objects define, instruction by instruction (objdump -dr,
  addresses and string constants' offsets normalized), and those that differ; the functions only
  one object defines are header inline functions the other did not emit;
- the CPU seconds of each compile, and what the harness's own compile did (`cu_header`).

    python tools/cu_header_check.py SOLUTION_OR_JSONL ... [--header small|lean] [--out DIR] [--jobs N] [--arch 9.0]

A .jsonl argument is a batch file (run_eval.py batch; tools/kb_corpus.py writes one): its `file`
entries. The same source path for both compiles matters: nvcc names the module's registration
symbols after it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.compile.build import cuda_home  # noqa: E402
from harness.compile.compile_only import compile_solutions, stub_dir  # noqa: E402
from harness.compile.compiler import CU_HEADER, CU_HEADER_LEAN  # noqa: E402
from harness.core.config import load_config, with_overrides  # noqa: E402

HEADERS = {"small": CU_HEADER, "lean": CU_HEADER_LEAN}


def _section(obj: Path, name: str) -> bytes:
    out = obj.parent / f"{obj.name}{name}.bin"
    subprocess.run(["objcopy", "-O", "binary", f"--only-section={name}", str(obj), str(out)], capture_output=True)
    data = out.read_bytes() if out.exists() else b""
    out.unlink(missing_ok=True)
    return data


def functions(obj: Path) -> dict[str, list[str]]:
    """{symbol: its instructions}, addresses left out and each reference to a string constant
    replaced by the string (its offset in .rodata differs between two objects)."""
    sections: dict[str, bytes] = {}

    def string_at(section: str, offset: int) -> str:
        data = sections.setdefault(section, _section(obj, section))
        end = data.find(b"\0", offset)
        return data[offset:end if end >= 0 else offset + 60][:60].decode("latin1")

    text = subprocess.run(["objdump", "-dr", "--no-show-raw-insn", str(obj)], capture_output=True, text=True).stdout
    found: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if head:
            current = head.group(1)
            found[current] = []
            continue
        if current is None or not line.strip() or line.startswith("Disassembly of section"):
            continue
        line = re.sub(r"^\s*[0-9a-f]+:\s*", "", line)
        line = re.sub(r"\b[0-9a-f]+ <", "<", line)
        line = re.sub(r"<([^>+]+)\+0x[0-9a-f]+>", r"<\1+.>", line)
        line = re.sub(r"(\.rodata[\w.]*)([+-]0x[0-9a-f]+)?$",   # PC-relative: the string is 4 bytes on
                      lambda m: m.group(1) + repr(string_at(m.group(1), int(m.group(2) or "0", 16) + 4)), line)
        found[current].append(line)
    return found


def compare(a: Path, b: Path) -> dict:
    """The two objects of one recipe's cuda.cu (docstring)."""
    fa, fb = functions(a), functions(b)
    common = sorted(set(fa) & set(fb))
    differ = [k for k in common if fa[k] != fb[k]]
    return {"kernels_same": _section(a, ".nv_fatbin") == _section(b, ".nv_fatbin") != b"",
            "functions": len(common), "differ": differ, "only_torch_header": len(set(fa) - set(fb)),
            "only_this_header": len(set(fb) - set(fa))}


def nvcc_command(build_dir: Path, stubs: Path | None) -> list[str]:
    """The cuda.cu compile of a compile-only build folder's build.ninja (its stub folder, gone with
    the step's scratch, replaced by `stubs`), without build.cu_header's folders."""
    text = (build_dir / "build.ninja").read_text()
    get = lambda key: (re.search(rf"^{key} = ?(.*)$", text, re.M) or [None, ""])[1]  # noqa: E731
    cflags = [f for f in shlex.split(get("cuda_cflags")) if f not in {f"-I{h}" for h in HEADERS.values()}]
    cflags = [f"-I{stubs}" if "compile-only-stubs-" in f and f.startswith("-I") else f for f in cflags]
    return [get("nvcc"), *cflags, *shlex.split(get("cuda_post_cflags"))]


def compile_twice(build_dir: Path, where: Path, stubs: Path | None, header: Path = CU_HEADER) -> dict:
    """cuda.cu compiled in `where` with `header`'s folder and without: CPU-s, exit codes, objects."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy(build_dir / "cuda.cu", where / "cuda.cu")
    command = nvcc_command(build_dir, stubs)
    row = {}
    for mode, extra in (("header", [f"-I{header}"]), ("torch", [])):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([*command[:1], *extra, *command[1:], "-c", "cuda.cu", "-o", f"{mode}.o"], cwd=where,
                              capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        row[f"{mode}_rc"] = proc.returncode
        row[f"{mode}_cpu_s"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)
    if row["header_rc"] == row["torch_rc"] == 0:
        row.update(compare(where / "torch.o", where / "header.o"))
    return row


def _demangle(names: list[str]) -> list[str]:
    if not names:
        return []
    out = subprocess.run(["c++filt", *names], capture_output=True, text=True).stdout.splitlines()
    return out if len(out) == len(names) else names


def _in_std(demangled: str) -> bool:
    """A function of the C++ standard library (its return type may come first)."""
    return re.match(r"^(?:[\w:<>, *&]+ )?std::", demangled) is not None


def files_of(args: list[str]) -> list[Path]:
    files = []
    for arg in args:
        if arg.endswith(".jsonl"):
            files += [Path(json.loads(line)["file"]) for line in Path(arg).read_text().splitlines() if line.strip()]
        else:
            files.append(Path(arg))
    return files


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", default="/tmp/kb-cu-header-check", help="the build cache, the compiles and the report")
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--arch", default="9.0")
    ap.add_argument("--header", choices=sorted(HEADERS), default="small", help="the header compared with torch's")
    args = ap.parse_args(argv)
    out = Path(args.out)
    level = "lean" if args.header == "lean" else "on"
    cfg = with_overrides(load_config(None), {"build.cu_header": level, "build.cache_dir": str(out / "cache"),
                                             "results_dir": str(out / "results")})
    items = compile_solutions(files_of(args.inputs), cfg, arch=args.arch, jobs=args.jobs or None, out=lambda line: None)
    import torch.utils.cpp_extension as cpp_ext
    cpp_ext.CUDA_HOME = cpp_ext.CUDA_HOME or cuda_home()   # a CPU-only torch leaves it unset
    search = cpp_ext.include_paths("cuda") + ([str(Path(cuda_home(), "include"))] if cuda_home() else [])
    stubs = stub_dir(out / "stubs", search)
    todo = [(n, k, recipe) for n, item in enumerate(items) for k, recipe in enumerate(item["recipes"])
            if recipe.get("dir") and (Path(recipe["dir"]) / "cuda.cu").exists() and not recipe.get("cached")]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs or (os.cpu_count() or 1))) as pool:
        done = dict(zip([(n, k) for n, k, _ in todo],
                        pool.map(lambda t: compile_twice(Path(t[2]["dir"]), out / "same" / f"{t[0]}-{t[1]}", stubs,
                                                         HEADERS[args.header]), todo)))
    rows = []
    for n, item in enumerate(items):
        row = {"path": item["path"], "status": item["status"], "cu_header": [r.get("cu_header") for r in item["recipes"]]}
        for k, recipe in enumerate(item["recipes"]):
            if (n, k) in done:
                row[recipe["name"]] = {**done[(n, k)], "differ": _demangle(done[(n, k)].get("differ", []))}
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out / "report.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = [v for r in rows for v in r.values() if isinstance(v, dict)]
    both = [p for p in pairs if p["header_rc"] == p["torch_rc"] == 0]
    print(f"{len(rows)} solution(s), {len(pairs)} cuda.cu: {len(both)} compiled both ways, "
          f"{sum(p['header_rc'] != 0 and p['torch_rc'] == 0 for p in pairs)} only with torch's header, "
          f"{sum(p['header_rc'] == 0 and p['torch_rc'] != 0 for p in pairs)} only with the {args.header} one; "
          f"kernels the same in {sum(p['kernels_same'] for p in both)}; every common host function the same in "
          f"{sum(not p['differ'] for p in both)}, all but the standard library's (std::) in "
          f"{sum(all(_in_std(d) for d in p['differ']) for p in both)}; CPU-s {sum(p['header_cpu_s'] for p in both):.0f} with the "
          f"{args.header} header against {sum(p['torch_cpu_s'] for p in both):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
