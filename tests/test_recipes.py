"""The build cache's trusted side (harness/compile/recipes.py): what is published is the regular files of
a compile step's folder, under the key the runner computes; a build step's own writes are never
published, so a solution cannot plant a library for another (red team, through the real pipeline
in a throwaway copy of the repository)."""
import json
import os
import subprocess
import sys
from pathlib import Path


from harness.compile.build import LOG_NAME, folder_of, plain_params
from harness.compile.recipes import Compiler, Compiles, Compiled, publish, published
from test_sandbox import copy_repository, needs_full


def test_publish_copies_regular_files_and_nothing_a_link_points_at(tmp_path):
    built = tmp_path / "step" / "ext-0123"
    (built / "sub").mkdir(parents=True)
    (built / "ext.so").write_bytes(b"lib")
    (built / LOG_NAME).write_text("log")
    (built / "sub" / "x.o").write_bytes(b"obj")
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the cache")
    (built / "leak.so").symlink_to(secret)
    (built / "linked").symlink_to(tmp_path)
    target = tmp_path / "cache" / "ext-0123"
    publish(built, target)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == sorted([LOG_NAME, "ext.so", "sub", "sub/x.o"])
    assert published(target, compile_only=False)
    publish(built, target)  # an identical build landed first: left as it is
    assert (target / "ext.so").read_bytes() == b"lib"
    assert not published(tmp_path / "cache" / "missing", compile_only=False)


def test_identical_recipes_compile_once_and_a_failure_is_each_pairs_own(tmp_path):
    calls = []

    class Fake(Compiler):
        def run(self, recipe, where):
            calls.append(where)
            ok = recipe["params"]["cpp_sources"] != ["bad"]
            return Compiled({"name": "e", "dir": str(self.folder(recipe)) if ok else None, "ok": ok, "cached": False,
                             "seconds": 1.0}, None if ok else ("build_error", "no", "", "build"))

    compiler = Fake(tmp_path, "2.13", "cpu", {"mode": "off", "limits": {}}, [], {}, 60.0)
    good = {"params": plain_params({"name": "e", "cpp_sources": ["int f();"]})}
    bad = {"params": plain_params({"name": "e", "cpp_sources": ["bad"]})}
    compiles = Compiles()
    first = compiles.get(compiler, good, lambda: tmp_path / "a")
    second = compiles.get(compiler, good, lambda: tmp_path / "b")
    assert len(calls) == 1 and not first.ext["cached"] and second.ext["cached"] and second.ext["seconds"] == 0.0
    compiles.get(compiler, bad, lambda: tmp_path / "c")
    compiles.get(compiler, bad, lambda: tmp_path / "d")
    assert calls[1:] == [tmp_path / "c", tmp_path / "d"]
    assert compiler.folder(good).name == folder_of(good["params"], "2.13", "cpu")


def _run(repo: Path, results: Path, cache: Path, solution: str, run_id: str) -> dict:
    proc = subprocess.run([sys.executable, "run_eval.py", "--problem", "elementwise_add", "--solution", solution,
                           "--config", str(repo / "tests/fixtures/configs/fast.yaml"), "--results-dir", str(results),
                           "--run-id", run_id], cwd=repo, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(repo), "KB_BUILD_CACHE": str(cache)})
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    name = Path(solution).stem
    return json.loads((results / run_id / f"elementwise_add__{name}.json").read_text())


@needs_full
def test_a_library_planted_by_a_solution_is_never_loaded_for_another(tmp_path):
    """sandbox_cache_plant records cpp_add's exact load_inline call and plants a library where a
    build step's (or its worker's) output could be taken from. Its own pair is ok; the cache then
    holds what cpp_add's sources compile to, and the next run of cpp_add loads that, reused."""
    repo = copy_repository(tmp_path)
    cache, results = tmp_path / "cache", tmp_path / "results"
    planter = _run(repo, results, cache, str(repo / "tests/fixtures/solutions/sandbox_cache_plant.py"), "plant")
    assert planter["status"] == "ok", planter["message"]
    marker = b"planted by sandbox_cache_plant"
    assert not [p for p in cache.rglob("*") if p.is_file() and marker in p.read_bytes()]
    victim = _run(repo, results, cache, "cpp_add", "victim")
    assert victim["status"] == "ok", victim["message"]
    (ext,) = victim["build"]["extensions"]
    assert ext["cached"] and ext["name"] == "elementwise_add_cpp"
    assert marker not in (Path(ext["dir"]) / "elementwise_add_cpp.so").read_bytes()
