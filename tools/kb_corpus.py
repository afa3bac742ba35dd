"""A corpus of LLM-written KernelBench solutions (levels 1 and 2) for measuring the harness at volume
(issue 76): the solutions of KernelBench's public leaderboard (anneouyang/KernelBenchLeaderboard:
claude-3.5-sonnet, gpt-o1, gpt-4o, deepseek-coder, gemini-1.5-flash, llama-3.1, each with the
speedup the leaderboard measured), each against its problem file byte for byte as KernelBench had it
when they were written (ScalingIntelligence/KernelBench at 8542319, which the leaderboard's own copies
match), and, for the incorrect side, mutants: a solution whose first `threadIdx.x` reads one further
(an off-by-one in the index, the commonest slip of a generated kernel).

    python tools/kb_corpus.py --out DIR [--kernelbench GIT] [--leaderboard GIT] [--levels 1,2]
                              [--count N] [--mutants SHARE] [--seed S]

GIT is a clone (a bare one will do) or a URL; without it the repository is cloned from GitHub into
~/.cache/kb-harness/corpus-src. Both are read at the pinned commits below, whatever is checked out.
Writes DIR/problems/level<L>/<file>, DIR/solutions/<name>.py, DIR/submissions.jsonl (one line per
solution, as `run_eval.py batch` takes it; the tag holds its origin: level, problem, model, the
leaderboard's speedup, or the solution a mutant was made from) and DIR/manifest.json. --count takes
a deterministic sample (every level in proportion, the share --mutants of them mutants); texts
already in the corpus are left out, so every line builds on its own.

    python run_eval.py batch DIR/submissions.jsonl --run-id corpus
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

KERNELBENCH = ("https://github.com/ScalingIntelligence/KernelBench", "8542319d0851d550296c1d33ec1a9cdd9f0eb366")
LEADERBOARD = ("https://github.com/anneouyang/KernelBenchLeaderboard", "170ca7965f53bba599d1078b6fcaa5dd2658ec50")
MUTATION = ("threadIdx.x", "(threadIdx.x + 1)")


class CorpusError(Exception):
    pass


def repo(given: str, url: str) -> str:
    """A git directory to read from: the one given, or a clone of url in the cache."""
    if given and Path(given).exists():
        return given
    target = Path.home() / ".cache" / "kb-harness" / "corpus-src" / url.rstrip("/").split("/")[-1]
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["git", "clone", "--bare", "--quiet", given or url, str(target)], capture_output=True,
                              text=True)
        if done.returncode:
            raise CorpusError(f"cannot clone {given or url}: {done.stderr.strip()[-300:]}")
    return str(target)


def show(git: str, commit: str, path: str) -> bytes:
    done = subprocess.run(["git", "-C", git, "show", f"{commit}:{path}"], capture_output=True)
    if done.returncode:
        raise CorpusError(f"{git}: no {path} at {commit[:10]} ({done.stderr.decode(errors='replace').strip()[-200:]})")
    return done.stdout


def listing(git: str, commit: str, folder: str) -> list[str]:
    done = subprocess.run(["git", "-C", git, "ls-tree", "--name-only", f"{commit}:{folder}"], capture_output=True,
                          text=True)
    if done.returncode:
        raise CorpusError(f"{git}: no folder {folder} at {commit[:10]}")
    return done.stdout.split()


def mutant(text: str) -> str | None:
    """The solution with its first threadIdx.x one further, or None where its text has none."""
    return text.replace(MUTATION[0], MUTATION[1], 1) if MUTATION[0] in text else None


def name_of(model: str, digest: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", model).strip("_")[:40] + "_" + digest[:10]


def build(kernelbench: str, leaderboard: str, out: Path, levels: set[int], count: int, mutants: float,
          seed: int, commits: tuple[str, str] = (KERNELBENCH[1], LEADERBOARD[1])) -> dict:
    kb_commit, lb_commit = commits
    board = json.loads(show(leaderboard, lb_commit, "docs/assets/data.json"))   # "Level L: N_name" -> solutions
    files: dict[tuple[int, str], str] = {}
    for level in sorted(levels):
        for name in listing(kernelbench, kb_commit, f"KernelBench/level{level}"):
            files[(level, name.split("_", 1)[0])] = name
    upstream, seen = [], set()
    for key, solutions in board.items():
        m = re.fullmatch(r"Level (\d+): (\d+)_.*", key)
        if not m:
            raise CorpusError(f"leaderboard data.json: a key {key!r} that names no level and problem")
        level, pid = int(m.group(1)), m.group(2)
        if level not in levels:
            continue
        if (level, pid) not in files:
            raise CorpusError(f"leaderboard's {key!r}: no problem {pid} in KernelBench level {level}")
        for e in solutions:
            text = show(leaderboard, lb_commit, f"docs/assets/solutions/{e['file']}.py").decode()
            digest = hashlib.sha256(text.encode()).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            upstream.append({"level": level, "problem_id": pid, "problem_file": files[(level, pid)], "text": text,
                             "digest": digest, "tag": {"origin": "leaderboard", "level": level, "problem_id": pid,
                                                       "model": e["display_name"], "leaderboard_file": e["file"],
                                                       "leaderboard_speedup": float(e["torch_speedup"])}})
    rng = random.Random(seed)
    rng.shuffle(upstream)
    made = []
    for u in upstream:
        text = mutant(u["text"])
        digest = hashlib.sha256(text.encode()).hexdigest() if text else None
        if text and digest not in seen:
            seen.add(digest)
            made.append({**u, "text": text, "digest": digest,
                         "tag": {**u["tag"], "origin": "mutant", "mutation": " -> ".join(MUTATION),
                                 "mutant_of": u["tag"]["leaderboard_file"]}})
    if count:
        n_mut = round(count * mutants)
        chosen = _by_level(upstream, count - n_mut) + _by_level(made, n_mut)
    else:
        chosen = upstream + made
    if not chosen:
        raise CorpusError("no solution chosen: check --levels and --count")
    out.mkdir(parents=True, exist_ok=True)
    lines, problems = [], set()
    for c in chosen:
        pfile = out / "problems" / f"level{c['level']}" / c["problem_file"]
        if pfile not in problems:
            body = show(kernelbench, kb_commit, f"KernelBench/level{c['level']}/{c['problem_file']}")
            own = f"docs/assets/problems/l{c['level']}_p{c['problem_id']}.py"
            if show(leaderboard, lb_commit, own) != body:
                raise CorpusError(f"KernelBench's {c['problem_file']} at {kb_commit[:10]} differs from the leaderboard's "
                                  f"{own}: the solutions were not written for it")
            pfile.parent.mkdir(parents=True, exist_ok=True)
            pfile.write_bytes(body)
            problems.add(pfile)
        name = name_of(c["tag"]["model"] + ("_mut" if c["tag"]["origin"] == "mutant" else ""), c["digest"])
        sfile = out / "solutions" / f"{name}.py"
        sfile.parent.mkdir(parents=True, exist_ok=True)
        sfile.write_text(c["text"])
        lines.append({"problem": str(pfile), "file": str(sfile), "name": name, "tag": c["tag"]})
    (out / "submissions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    manifest = {"kernelbench": kb_commit, "leaderboard": lb_commit, "levels": sorted(levels), "seed": seed,
                "solutions": len(lines), "problems": len(problems),
                "upstream": sum(1 for x in lines if x["tag"]["origin"] == "leaderboard"),
                "mutants": sum(1 for x in lines if x["tag"]["origin"] == "mutant"),
                "by_level": {str(lv): sum(1 for x in lines if x["tag"]["level"] == lv) for lv in sorted(levels)}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _by_level(items: list[dict], n: int) -> list[dict]:
    """n of items (already shuffled), every level in proportion to its share."""
    if n >= len(items):
        return list(items)
    levels = sorted({i["level"] for i in items})
    picked: list[dict] = []
    for k, level in enumerate(levels):
        of = [i for i in items if i["level"] == level]
        want = n - len(picked) if k == len(levels) - 1 else round(n * len(of) / len(items))
        picked += of[:want]
    return picked


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--kernelbench", default="", help="a clone of ScalingIntelligence/KernelBench, or a URL")
    ap.add_argument("--leaderboard", default="", help="a clone of anneouyang/KernelBenchLeaderboard, or a URL")
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--count", type=int, default=0, help="how many solutions (default: all)")
    ap.add_argument("--mutants", type=float, default=0.4, help="the share of --count that are mutants (0.4)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        levels = {int(x) for x in args.levels.split(",") if x}
        if not levels <= {1, 2, 3} or not 0 <= args.mutants <= 1 or args.count < 0:
            raise ValueError
    except ValueError:
        print(f"kb_corpus: --levels {args.levels!r}, --mutants {args.mutants}, --count {args.count}: expected levels "
              "among 1,2,3, a share in [0, 1], a count of 0 or more", file=sys.stderr)
        return 2
    try:
        manifest = build(repo(args.kernelbench, KERNELBENCH[0]), repo(args.leaderboard, LEADERBOARD[0]),
                         Path(args.out), levels, args.count, args.mutants, args.seed)
    except CorpusError as exc:
        print(f"kb_corpus: {exc}", file=sys.stderr)
        return 2
    print(f"{manifest['solutions']} solutions ({manifest['upstream']} from the leaderboard, {manifest['mutants']} "
          f"mutants) over {manifest['problems']} problems, levels {manifest['by_level']}: {args.out}/submissions.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
