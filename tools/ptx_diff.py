"""Which kernels a change to the fast library moved, without a GPU: the library's PTX for sm_90a
(nvcc -ptx, the build's flags, torch's headers with compile-only's stubs for the CUDA ones a CPU
torch lacks) from two trees, compared kernel entry by kernel entry.

    python tools/ptx_diff.py BEFORE AFTER [--folder solutions/conv_transpose2d/_shared/fast] [--file dispatch.cu]
                             [--include FOLDER ...] [--show N]

e.g. the fused family's interleaving pass, with the library's headers it includes:
    python tools/ptx_diff.py HEAD~1 WORKTREE --folder solutions/conv_transpose2d_fused/_shared --file split.cu \
        --include solutions/conv_transpose2d/_shared/fast

BEFORE, AFTER: a git revision (its copy of the folder, by git archive) or WORKTREE (the folder as
it is). Entries are compared after normalising what changes without the code changing: the file's
hash in anonymous-namespace names, label and local-depot numbers, each entry's own name inside it,
and the virtual registers (renumbered in the order of first use). An entry one side lacks is paired
with one the other side lacks whose code is the same (renamed: a template parameter added renames
every instance of its kernel). Prints one line a differing entry, a renamed one and one only a side
has, and a summary line; exits 1 where an entry both sides have differs. `--show N`: after each
differing entry's line, the first N lines of a unified diff of its two normalised bodies (where the
change is, and whether it is one load or the whole kernel). Needs nvcc (about a
minute a tree for the conv library). Used for issue 77's steps (docs/perf-notes.md).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = "solutions/conv_transpose2d/_shared/fast"
# ct2d_fast.py's flags for an sm_90a build, as PTX (no ptxas), and torch's own nvcc defines
FLAGS = ["-O3", "-std=c++17", "-gencode=arch=compute_90a,code=compute_90a", "-DCT2D_WGMMA",
         "--expt-relaxed-constexpr", "-DTORCH_EXTENSION_NAME=ptx_diff"]


def tree_folder(spec: str, folder: str, scratch: Path) -> Path:
    """The folder as it is (WORKTREE) or at a git revision (extracted under scratch)."""
    if spec == "WORKTREE":
        return ROOT / folder
    out = scratch / re.sub(r"\W", "_", spec)
    out.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", spec, folder], cwd=ROOT, capture_output=True)
    if archive.returncode != 0:
        sys.exit(f"ptx_diff: {spec}: {archive.stderr.decode().strip() or 'git archive failed'}")
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out / folder


def compile_ptx(folder: Path, name: str, scratch: Path, extra: tuple[Path, ...] = ()) -> str:
    from torch.utils import cpp_extension

    from harness.compile.compile_only import stub_dir
    nvcc = shutil.which("nvcc") or str(Path(cpp_extension.CUDA_HOME or "/usr/local/cuda") / "bin" / "nvcc")
    includes = cpp_extension.include_paths()
    stubs = stub_dir(scratch, includes)
    cuda_include = Path(nvcc).resolve().parents[1] / "include"
    out = scratch / f"side-{len(list(scratch.glob('side-*.ptx')))}.ptx"
    cmd = [nvcc, *FLAGS, *cpp_extension.COMMON_NVCC_FLAGS, *[f"-I{p}" for p in includes],
           f"-I{sysconfig.get_paths()['include']}", *([f"-I{stubs}"] if stubs else []), f"-I{cuda_include}",
           f"-I{folder}", *[f"-I{p}" for p in extra], "-ptx", str(folder / name), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stdout.splitlines() + done.stderr.splitlines() if "error" in line]
        sys.exit(f"ptx_diff: nvcc failed on {folder / name}: " + ("; ".join(errors[:3]) or done.stderr[-500:]))
    return out.read_text()


def entries(ptx: str) -> dict[str, str]:
    """The PTX's kernel entries by name (its file hash taken out), each normalised (module doc)."""
    text = re.sub(r"_GLOBAL__N__[0-9a-f]{8}_\d+_\w+?_[0-9a-f]{8}", "_GN_", ptx)
    text = re.sub(r"\$L__BB\d+_", "$L__BB_", text)
    text = re.sub(r"__local_depot\d+", "__local_depot", text)
    text = re.sub(r"\$__internal_\d+", "$__internal", text)
    text = re.sub(r"_INTERNAL_[0-9a-f]{8}_", "_INTERNAL_", text)
    out = {}
    for part in re.split(r"(?m)^(?=\.(?:visible |weak )?\.?entry )", text)[1:]:
        name = re.match(r"\.(?:visible |weak )?\.?entry (\S+?)\(", part).group(1)
        out[name] = renumber(part.replace(name[2:], "ENTRY"))
    return out


def renumber(body: str) -> str:
    """Virtual registers renamed in the order of first use (their counts' declarations dropped)."""
    body = re.sub(r"(?m)^\s*\.reg .*$", "", body)
    seen: dict[str, str] = {}
    counts: dict[str, int] = {}

    def sub(m: re.Match) -> str:
        reg = m.group(0)
        if reg not in seen:
            kind = m.group(1)
            seen[reg] = f"%{kind}#{counts.get(kind, 0)}"
            counts[kind] = counts.get(kind, 0) + 1
        return seen[reg]
    return re.sub(r"%(rd|rs|r|fd|f|p|hh|h)(\d+)\b", sub, body)


def compare(before: dict[str, str], after: dict[str, str]):
    """(differing, renamed [(before, after)] with the same code, only before, only after, identical count)."""
    differ = [k for k in before if k in after and before[k] != after[k]]
    same = sum(1 for k in before if k in after and before[k] == after[k])
    gone, new = [k for k in before if k not in after], [k for k in after if k not in before]
    by_code = {after[k]: k for k in new}
    renamed = [(k, by_code.pop(before[k])) for k in gone if before[k] in by_code]
    paired = {k for pair in renamed for k in pair}
    return differ, renamed, [k for k in gone if k not in paired], [k for k in new if k not in paired], same


def shown(before: str, after: str, lines: int) -> list[str]:
    """The first `lines` lines of a unified diff of two normalised entries (their hunks, no header)."""
    import difflib
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=1)
    return [line for line in diff if not line.startswith(("---", "+++"))][:lines]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--folder", default=FOLDER, help=f"the library's folder in the repository (default {FOLDER})")
    ap.add_argument("--file", default="dispatch.cu", help="the translation unit in it (default dispatch.cu)")
    ap.add_argument("--include", action="append", default=[], metavar="FOLDER",
                    help="a repository folder also on the include path, as the working tree has it (both sides)")
    ap.add_argument("--show", type=int, default=0, metavar="N",
                    help="print the first N lines of each differing entry's unified diff (default 0: none)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="ptx_diff_") as tmp:
        scratch = Path(tmp)
        extra = tuple(ROOT / f for f in args.include)
        sides = [entries(compile_ptx(tree_folder(spec, args.folder, scratch), args.file, scratch, extra))
                 for spec in (args.before, args.after)]
    differ, renamed, gone, new, same = compare(*sides)
    for name in differ:
        print(f"differs: {name}")
        for line in shown(sides[0][name], sides[1][name], args.show) if args.show > 0 else []:
            print(f"    {line}")
    for old, name in renamed:
        print(f"renamed, the same code: {old} -> {name}")
    for name in gone:
        print(f"only in {args.before}: {name}")
    for name in new:
        print(f"only in {args.after}: {name}")
    print(f"ptx_diff: {len(sides[0])} entries in {args.before}, {len(sides[1])} in {args.after}: {same} identical, "
          f"{len(renamed)} renamed with the same code, {len(differ)} differ, {len(gone)} only in {args.before}, "
          f"{len(new)} only in {args.after}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
