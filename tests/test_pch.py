"""A precompiled torch/extension.h for main.cpp (harness/compile/pch.py): only for recipes whose
flags cannot change what the header means, made by the trusted side the second time a flag set is
asked for, read by the sandboxed compile step, and the object it gives is the one without it,
byte for byte."""
import json
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.compile import pch
from harness.compile.compile_only import compile_solutions
from harness.core.config import load_config, with_overrides
from conftest import FIXTURES

SOURCE = '''import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# main.cpp includes torch/extension.h twice, as many generated kernels' cpp_sources do: load_inline's
# line, then the solution's own (the second is read as the header itself, not precompiled)
ext = load_inline(name="pch_probe", cpp_sources="#include <torch/extension.h>\\n"
                  "torch::Tensor twice(torch::Tensor x) { return x * 2; }", functions=["twice"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.twice(a) + b - a
'''


def test_only_flags_that_name_no_file_and_no_folder_of_its_own_may_read_it():
    plain = {"cpp_sources": "int f();", "extra_cflags": ["-O3", "-DN=4", "-std=c++20", "-Wall", "-march=native"]}
    assert pch.eligible(plain) and pch.eligible({"cpp_sources": ["int f();"]})
    assert pch.eligible({"cpp_sources": "int f();", "extra_cflags": [""]})   # KernelBench's template: no flag
    for bad in ({"extra_cflags": ["-include", "x.h"]}, {"extra_cflags": ["-I/tmp"]}, {"extra_cflags": ["-fplugin=x.so"]},
                {"extra_cflags": ["-B/tmp"]}, {"extra_cflags": ["-specs=x"]}, {"extra_cflags": ["@opts"]},
                {"extra_include_paths": ["/tmp"]}, {"no_implicit_headers": True}, {"use_pch": True},
                {"cpp_sources": ""}):
        assert not pch.eligible({**plain, **bad}), bad


def test_main_cpp_read_through_it_is_the_same_object(tmp_path):
    solution = tmp_path / "sol" / "pch_probe.py"
    solution.parent.mkdir()
    solution.write_text(SOURCE)
    root = tmp_path / "on" / "pch"
    assert pch.make(root, False, []) == {"why": "first"}   # a flag set asked for once is not worth 800 MB
    made = pch.make(root, False, [])
    folder = Path(made["folder"])
    assert (folder / pch.GCH).is_file() and json.loads((folder / "made.json").read_text())["flags"]
    objects = {}
    for mode in ("on", "off"):
        cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                             {"build.cache_dir": str(tmp_path / mode), "build.pch": mode,
                              "build.main_header": "full"})   # torch's header, the one made above
        [item] = compile_solutions([solution], cfg, out=lambda line: None)
        assert item["status"] == "ok", item["message"]
        [built] = (tmp_path / mode / "compile-only").glob("pch_probe-*")
        log = (built / "harness_build.log").read_text()
        assert (f"-I{folder}" in log) is (mode == "on"), log[-2000:]
        objects[mode] = (built / "main.o").read_bytes()
        if mode == "on":   # the first include came from the .gch (GCC's -H marks the one it used with "!")
            [command] = [line.split("] ", 1)[-1] for line in log.splitlines() if line.startswith("[") and "main.o" in line]
            argv = ["main.cpp" if a.endswith("/main.cpp") else a for a in shlex.split(command)
                    if a not in ("-o", "main.o")] + ["-H", "-fsyntax-only"]   # in the built folder
            trace = subprocess.run(argv, cwd=built, capture_output=True, text=True).stderr
            assert f"! {folder / pch.GCH}" in trace.splitlines(), trace[:2000]
    assert objects["on"] == objects["off"]


def test_the_ask_that_makes_it_does_not_wait_for_it(tmp_path):
    """Builds started together: the second ask starts the header's making in the background and
    compiles without it, as does any ask while it is made; once made, it is handed out. The helpers
    forked by the fork server (build.start fork, Linux's default); a staging folder that a killed
    maker left is removed by the next."""
    import threading
    import time
    from harness.isolate import isolation
    root = tmp_path / "pch"
    params = {"cpp_sources": "int f();", "extra_cflags": ["-O2", "-DKB_PCH_TEST=1"]}
    try:
        assert pch.header_for(root, params, {}, start="fork") == (None, "asked once so far")   # one-off so far
        assert "steps" in isolation._FORK                      # the helper was forked, not exec'd
        [count] = root.glob("*.lock")
        stale = root / f".{count.stem}.killed" / pch.GCH      # what a maker killed mid-compile leaves
        stale.parent.mkdir(parents=True)
        stale.write_bytes(b"partial")
        start = time.monotonic()
        assert pch.header_for(root, params, {}, start="fork") == (None, "being made")   # the second: made in the background
        asked_s = time.monotonic() - start
        assert pch.header_for(root, params, {}, start="fork") == (None, "being made")   # no wait, no second maker
        [maker] = [t for t in threading.enumerate() if t.name == "kb-pch"]
        maker.join(timeout=900)
    finally:
        isolation.close_fork_server()
    folder, why = pch.header_for(root, params, {})
    assert why == "read" and folder and (Path(folder) / pch.GCH).is_file()
    assert pch.header_for(root, {**params, "extra_include_paths": ["/tmp"]}, {}) == (None, "not eligible")
    made_s = json.loads((Path(folder) / "made.json").read_text())["seconds"]
    assert asked_s < made_s, (asked_s, made_s)               # the ask returned before the header was made
    assert not list(root.glob(".*"))                         # no staging folder left


def test_another_process_making_it_is_not_waited_for(tmp_path):
    import fcntl
    root = tmp_path / "pch"
    assert pch.make(root, False, [], "ask") == {"why": "first"}
    [count] = root.glob("*.lock")
    with open(count.with_suffix(".making"), "a+") as making:     # a helper of another process makes it
        fcntl.flock(making, fcntl.LOCK_EX)
        assert pch.make(root, False, [], "ask") == {"why": "being made"}
    assert pch.make(root, False, [], "ask") == {"why": "to make"}


def test_a_header_that_could_not_be_made_says_why_in_the_build_record(tmp_path, monkeypatch):
    """What the build record's `pch` says where the helper fails (the H200 corpus run had no
    main.cpp read one and no record of why)."""
    monkeypatch.setattr(pch, "_helper", lambda request, env, what, start: {"why": "failed", "log": "the helper exited 1\n"
                                                                   "IndexError: list index out of range\n"})
    params = {"cpp_sources": "int f();", "extra_cflags": ["-DKB_PCH_FAILS=1"]}
    assert pch.header_for(tmp_path, params, {}) == (None, "failed: IndexError: list index out of range")
    assert pch.header_for(tmp_path, params, {}) == (None, "failed: IndexError: list index out of range")  # memoized


@pytest.mark.parametrize("start", ["exec", "fork"])
def test_the_helper_is_not_reaped_as_a_stray(tmp_path, start):
    """The runner, a child subreaper while it runs sandboxed steps, kills every child it did not
    start through isolation.popen after each step. The helper is the runner's own (exec'd) or its
    fork server's (forked): on the H200 every helper was killed so (the records said `the helper
    exited -9`, or an empty answer where the reaper took its exit status first), and no main.cpp
    read a header."""
    import threading
    from harness.isolate import isolation
    answers = []
    try:
        with isolation.reaping(True):
            asker = threading.Thread(target=lambda: answers.append(
                pch._helper({"root": str(tmp_path / "pch"), "with_cuda": False, "extra_cflags": []}, {}, "ask", start)))
            asker.start()
            reaped = 0
            while asker.is_alive():
                reaped += isolation.reap_strays()
                asker.join(timeout=0.05)
    finally:
        isolation.close_fork_server()
    assert answers == [{"why": "first"}]
    assert reaped == 0


def test_a_header_the_build_uid_cannot_reach_is_not_put_on_its_path(tmp_path):
    """A root harness whose build cache sits under a 0700 home: the step's uid cannot pass it, and
    main.cpp's `-I` would fail its compile (Permission denied: 79 correct solutions' build_error in
    the H200 corpus run with build.pch: on). The header is left out there, and the record says why."""
    from harness.compile.recipes import reachable_header
    home = tmp_path / "home"
    folder = home / "cache" / "pch" / "k"
    (folder / pch.GCH).parent.mkdir(parents=True)
    (folder / pch.GCH).write_bytes(b"")
    for path in (tmp_path, home / "cache", home / "cache" / "pch", folder, folder / "torch"):
        path.chmod(0o755)
    home.chmod(0o700)
    policy = {"uid": 12345, "readable": [str(folder.resolve()), "/elsewhere"]}
    header, why = reachable_header(str(folder), "read", policy)
    assert header is None and why.startswith(f"not reachable by the build's uid: {home} is closed to others (mode 700)")
    assert policy["readable"] == ["/elsewhere"]
    assert reachable_header(str(folder), "read", {"uid": None, "readable": []}) == (str(folder), "read")  # same identity
    home.chmod(0o711)
    policy = {"uid": 12345, "readable": [str(folder.resolve())]}
    assert reachable_header(str(folder), "read", policy) == (str(folder), "read")
    assert policy["readable"] == [str(folder.resolve())]


def test_every_device_reads_it_and_the_lean_cu_header_unless_they_are_off(tmp_path):
    """`auto` is on for CUDA runs too, build.pch and build.cu_header alike, since the GPU smoke ran
    with them (they were CPU-only and compile-only until then); a run's cu_header `auto` is the lean
    header since an H100 run of corpus100 compared its verdicts with a44ea8e's (docs/harness-perf.md),
    `on` the small one."""
    from harness.run.pipeline import RunContext
    for device, mode, wanted, header in (("cuda", "auto", True, "lean"), ("cpu", "auto", True, "lean"),
                                         ("cuda", "on", True, "small"), ("cuda", "off", False, "off"),
                                         ("cpu", "off", False, "off")):
        cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"), {"build.pch": mode, "build.cu_header": mode})
        ctx = RunContext("r", cfg, device, "9.0" if device == "cuda" else "cpu", tmp_path / "cache", tmp_path / "work")
        assert ctx.compiler().pch is wanted, (device, mode)
        assert ctx.compiler().cu_header == header, (device, mode)
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"), {"build.cu_header": "lean"})
    assert RunContext("r", cfg, "cuda", "9.0", tmp_path / "cache", tmp_path / "work").compiler().cu_header == "lean"


FRONTEND = '''import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="lean_probe_nn", cpp_sources="torch::Tensor add_nn(torch::Tensor a, torch::Tensor b) "
                  "{ return torch::nn::functional::dropout(a, torch::nn::functional::DropoutFuncOptions().p(0.0)) + b; }",
                  functions=["add_nn"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add_nn(a, b)
'''
PLAIN = FRONTEND.replace("lean_probe_nn", "lean_probe").replace("add_nn", "add_plain").replace(
    "torch::nn::functional::dropout(a, torch::nn::functional::DropoutFuncOptions().p(0.0))", "a.clone()")


def test_the_lean_main_header_builds_what_runs_and_torchs_header_builds_the_frontend(tmp_path):
    """build.main_header lean on the CPU, real compiles: a main.cpp that needs only tensors builds
    with the lean header (precompiled, once the flag set is asked for again) and is right; one that
    uses torch's C++ frontend (torch::nn) fails with it and is built again with torch's header, and
    is right too. The precompiled lean header is the lean header's text beside its .gch."""
    from harness.core.problems import problem_from_path
    from harness.core.solutions import Pair, solution_from_path
    from harness.run.runner import evaluate
    from conftest import ADD_PROBLEM
    (tmp_path / "sol").mkdir()
    paths = []
    for name, text in (("lean_plain", PLAIN), ("lean_plain_again", PLAIN.replace("lean_probe", "lean_probe2")),
                       ("lean_frontend", FRONTEND)):
        paths.append(tmp_path / "sol" / f"{name}.py")
        paths[-1].write_text(text)
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(tmp_path / "results"), "build.cache_dir": str(tmp_path / "cache"),
                          "build.main_header": "lean", "build.jobs": 1})
    pairs = [Pair(problem_from_path(ADD_PROBLEM), solution_from_path(p)) for p in paths]
    results = {r.solution["name"]: r for r in evaluate(pairs, cfg, run_id="lean", out=lambda line: None)}
    for name in ("lean_plain", "lean_plain_again", "lean_frontend"):
        assert results[name].status.value == "ok", (name, results[name].message)
    header = {name: results[name].build["extensions"][0]["main_header"] for name in results}
    assert header["lean_plain"] == header["lean_plain_again"] == "lean", header
    assert header["lean_frontend"].startswith("compiled again with torch's header: ") and "nn" in header["lean_frontend"]
    assert [results[name].build["extensions"][0]["pch"] for name in ("lean_plain", "lean_plain_again")] == \
        ["asked once so far", "being made"]
    folder = Path(pch.make(tmp_path / "cache" / "pch", False, [], "make", lean=True)["folder"])   # made, or waited for
    assert (folder / pch.GCH).is_file()
    assert (folder / pch.GCH.with_suffix("")).read_text() == (pch.MAIN_HEADER_LEAN / "torch" / "extension.h").read_text()
