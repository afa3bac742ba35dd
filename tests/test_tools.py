"""The A/B tool's variant parsing (tools/ab_variants.py; the timing itself needs a GPU)."""
import json
import re
import pytest

from harness import REPO_ROOT
from tools.ab_variants import variant_source

BASE = {"dispatch.cu": "int a = 1;\n", "mma.cuh": "int b = 2;\n"}


def test_base_is_the_folder_as_it_is():
    assert variant_source("base", BASE) == ("base", BASE)


def test_replacement_variant_replaces_the_exact_string_in_the_file_that_holds_it():
    assert variant_source("two=int b = 2;@@int b = 3;", BASE) == ("two", {**BASE, "mma.cuh": "int b = 3;\n"})


def test_replacement_that_does_not_occur_names_the_variant():
    with pytest.raises(SystemExit, match="variant x: the string to replace does not occur"):
        variant_source("x=int c = 2;@@int c = 3;", BASE)


def test_replacement_in_two_files_is_refused():
    with pytest.raises(SystemExit, match="variant x: the string to replace occurs in more than one file: dispatch.cu, mma.cuh"):
        variant_source("x=int@@long", BASE)


def test_file_variant_is_built_alone(tmp_path):
    other = tmp_path / "fast.cu"
    other.write_text("// other\n")
    assert variant_source(f"old={other}", BASE) == ("old", {"fast.cu": "// other\n"})


def test_folder_variant_reads_every_file(tmp_path):
    (tmp_path / "dispatch.cu").write_text("// d\n")
    (tmp_path / "phase.cuh").write_text("// p\n")
    assert variant_source(f"old={tmp_path}", BASE) == ("old", {"dispatch.cu": "// d\n", "phase.cuh": "// p\n"})


def test_neither_file_nor_replacement_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="neither OLD@@NEW, a folder nor a file"):
        variant_source(f"old={tmp_path / 'missing.cu'}", BASE)


def _shapes(pid):
    """(init inputs, x shape, y shape) of a conv_transpose2d problem, from its file (no GPU)."""
    from harness.core.problems import load_module, select
    from tools.plan_table import shapes
    [problem] = select(pid)
    mod = load_module(problem.path)
    init = list(mod.get_init_inputs())
    return (init, *shapes(mod, init))


def test_plan_table_floors_match_the_perf_notes():
    """docs/perf-notes.md: 57 is compute-bound at 618.5 GFLOP (1.25 ms at TF32's 495 TFLOP/s); 75 is
    bound by writing its output (0.20 ms at 4.3 TB/s); bf16 halves the bytes."""
    from tools.plan_table import floor_ms, markdown
    init, xs, ys = _shapes("57")
    assert floor_ms(init, xs, ys, "tf32") == pytest.approx(1.25, abs=0.005)
    assert floor_ms(init, xs, ys, "fp32") == pytest.approx(1.25 * 3 * 495 / 989, rel=1e-3)
    init, xs, ys = _shapes("75")
    assert floor_ms(init, xs, ys, "tf32") == pytest.approx(0.20, abs=0.01)
    assert floor_ms(init, xs, ys, "bf16") == pytest.approx(floor_ms(init, xs, ys, "tf32") / 2, rel=1e-6)
    row = {"problem": "75", "class": "bf16", "kernel": "ct2d_phase<4, 16, 1, 3, __nv_bfloat16>", "file": "phase.cuh",
           "config": "TF32 mma.sync", "io": "bf16", "ms": 0.391, "floor_ms": 0.1, "x_floor": 3.91}
    assert "| 75 | bf16 | `ct2d_phase<4, 16, 1, 3, __nv_bfloat16>` | `fast/phase.cuh` | TF32 mma.sync | 0.391 | 0.100 | 3.91x |" in markdown([row])
    tiny = {**row, "problem": "902", "ms": 0.047, "floor_ms": 1e-5, "x_floor": 4700.0}
    assert "| 0.047 | launch-bound | - |" in markdown([tiny])


def test_fused_plan_table_keeps_what_the_output_becomes():
    """The fused table names a plan's tiles and every clause that says what is written (the epilogue,
    z's type, the pass after the convolution), not the pipeline's stages."""
    from tools.plan_table import what_runs
    sub = ("one stride-1 convolution of 4 phases x 64 channels (sub-kernel 2x2): tile 7 rows x 68 columns (585 "
           "staged positions) x 64 channels, 4 channel block(s); 3 stages; epilogue via shared memory, 16-byte "
           "stores; z in fp16 (fp32 in, fp16 out); then subpixel_interleave (split.cu) with the bias and epilogue tanh")
    assert what_runs(sub) == ("one stride-1 convolution of 4 phases x 64 channels (sub-kernel 2x2): tile 7 rows x 68 "
                              "columns (585 staged positions) x 64 channels, 4 channel block(s); epilogue via shared "
                              "memory, 16-byte stores; z in fp16 (fp32 in, fp16 out); then subpixel_interleave "
                              "(split.cu) with the bias and epilogue tanh")
    sp = "4 phase GEMMs on TF32 mma.sync, a block per item; epilogue none, then the minimum over each block, in the store"
    assert what_runs(sp) == sp
    assert what_runs("tile 16 rows; 2 stages, consumers 1 chunk(s) apart") == "tile 16 rows"


def test_aa_runs_reads_a_variant_as_its_name_and_its_overrides():
    import argparse
    from tools.aa_runs import parse_variant
    assert parse_variant("on=timing.move_inputs=on,timing.rounds=20") == ("on", ["timing.move_inputs=on",
                                                                                 "timing.rounds=20"])
    assert parse_variant("default") == ("default", [])
    with pytest.raises(argparse.ArgumentTypeError, match="expected NAME"):
        parse_variant("=timing.rounds=20")


def test_gate_replay_counts_the_rounds_the_stopping_rule_would_add(tmp_path, capsys):
    """tools/gate_replay.py over a recorded gate run: a pair whose first 10 rounds already lie
    above 0.95 would add none (it added 20), one whose rounds hold 0.95 throughout goes on."""
    import json
    import random

    from tools.gate_replay import main
    rng = random.Random(0)

    def blocks(level, spread, n):
        return [[round(level * (1 + rng.uniform(-spread, spread)), 5)] * 5 for _ in range(n)]

    def result(then, now, added):
        flat = lambda b: sorted(x for r in b for x in r)[len(b) * 5 // 2]  # noqa: E731
        return {"timing": {"yardstick": {"rounds": then, "median_ms": flat(then), "settled_rounds": added,
                                         "now": {"rounds": now, "median_ms": flat(now)}}}}
    (tmp_path / "a__steady.json").write_text(json.dumps(result(blocks(1.0, 0.03, 30), blocks(1.0, 0.03, 30), 20)))
    (tmp_path / "b__slower.json").write_text(json.dumps(result(blocks(1.0, 0.12, 30), blocks(1.053, 0.12, 30), 20)))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("a__steady") and "added 20 would    0" in out[0], out
    assert out[1].startswith("b__slower") and "added 20" in out[1] and "would    0" not in out[1], out
    assert out[-1].startswith("rounds added: 40; under the rule:"), out


def test_gpu_smoke_counts_its_tests_and_a_part_that_ran_none_fails():
    from tools.gpu_smoke import pytest_part
    line, failed = pytest_part("..\n15 passed, 1 skipped in 234.0s\n", 0, "tests/test_gpu_lanes.py")
    assert failed == 0 and line == "pytest -m gpu tests/test_gpu_lanes.py: 15 passed, 0 failed, 1 skipped"
    assert pytest_part(".F\n1 failed, 1 passed in 3.0s\n", 1, "")[1]
    line, failed = pytest_part("\n107 deselected in 2.3s\n", 5, "-k 'nothing'")
    assert failed and "no GPU test ran" in line           # a selection that ran nothing is no pass
    assert pytest_part("\n3 skipped in 1.0s\n", 0, "")[1]   # nor one whose tests all skipped
    assert pytest_part("", -9, "")[1]                      # killed: no line at all


def test_gpu_smoke_runs_its_pairs_at_once_and_judges_each_by_its_result(tmp_path, monkeypatch):
    import io
    import sys
    import time
    from tools import gpu_smoke
    monkeypatch.setattr(gpu_smoke, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(gpu_smoke, "PAIRS", [("p", "good", {"ok"}), ("p", "cheat", {"incorrect"}),
                                             ("p", "open", {"ok"}), ("p", "none", {"ok"})])
    monkeypatch.setattr(gpu_smoke, "sandbox_problems",
                        lambda r: [] if r["sandbox"]["active"] else ["landlock-fs"])
    script = ("import json, sys, time, pathlib; run, sol = sys.argv[1:]; time.sleep(3 if sol == 'good' else 1)\n"
              "print('ran', sol)\n"
              "if sol != 'none':\n"
              "    d = pathlib.Path(%r) / run; d.mkdir(parents=True)\n"
              "    status = {'good': 'ok', 'cheat': 'incorrect', 'open': 'ok'}[sol]\n"
              "    json.dump({'status': status, 'message': 'm', 'sandbox': {'active': [] if sol == 'open' else ['x']}},"
              " open(d / 'r.json', 'w'))\n" % str(tmp_path / "results"))
    monkeypatch.setattr(gpu_smoke, "pair_command", lambda problem, solution, run_id:
                        [sys.executable, "-c", script, run_id, solution])
    log = io.StringIO()
    start = time.monotonic()
    passed, notes = gpu_smoke.run_pairs(tmp_path, log)
    assert time.monotonic() - start < 5                     # four runs of 1-3 s, at once
    assert passed == 2, notes
    assert notes == ["p/open: ok (wanted ok), sandbox without landlock-fs: m", "p/none: 0 results (exit 0)"]
    text = log.getvalue()                                    # each run's output, in PAIRS' order
    assert [text.index(f"ran {s}") for s in ("good", "cheat", "open", "none")] == sorted(
        text.index(f"ran {s}") for s in ("good", "cheat", "open", "none"))
    took = {m[0]: int(m[1]) for m in re.findall(r"--solution (\w+) \(exit 0, (\d+) s\)", text)}
    assert took["good"] >= 3 and took["cheat"] < took["good"], took     # each run's own time


def test_variant_arity_reads_the_variants_own_argument_list():
    from tools.ab_variants import variant_arity
    args = "#define CT2D_ARGS                \\\n  torch::Tensor x, torch::Tensor wp,  \\\n      int64_t epilogue, double epi_a\n#define X\n"
    assert variant_arity({"dispatch.cu": args, "mma.cuh": "int b;\n"}, 28) == 4
    single = "torch::Tensor conv_transpose2d_fast(torch::Tensor x, torch::Tensor wp, int64_t config) {\n  return x;\n}\n"
    assert variant_arity({"fast.cu": single}, 28) == 3
    assert variant_arity({"dispatch.cu": "int a;\n"}, 28) == 28
    current = (REPO_ROOT / "solutions/conv_transpose2d/_shared/fast/dispatch.cu").read_text()
    src = (REPO_ROOT / "solutions/conv_transpose2d/_shared/ct2d_fast.py").read_text()
    declared = src[src.index('_ARGS = """') + 11:src.index('"""', src.index('_ARGS = """') + 11)]
    assert variant_arity({"dispatch.cu": current}, 0) == declared.count(",") + 1


def test_a_truncated_variant_takes_the_first_arguments_and_refuses_a_later_one_set():
    from tools.ab_variants import Truncated

    class Ext:
        def conv_transpose2d_fast(self, *args):
            return args

        def Bound(self, *static):  # noqa: N802
            return ("bound",) + static
    t = Truncated(Ext(), 3)
    assert t.conv_transpose2d_fast("x", "w", 5, 0, 0.0, 0) == ("x", "w", 5)
    with pytest.raises(RuntimeError, match="takes 3 arguments"):
        t.conv_transpose2d_fast("x", "w", 5, 0, 0.0, 1)
    assert t.Bound("w", 5, 0, 0.0, 0) == ("bound", "w", 5)       # every argument but x: the first n - 1
    with pytest.raises(RuntimeError, match="takes 3 arguments"):
        t.Bound("w", 5, 0, 0.5, 0)


def test_lane_clock_reads_what_the_harness_held_a_pair_to(tmp_path, capsys):
    from tools import lane_clock

    from test_results import make_result
    base = make_result().to_dict()
    vouch = {"reported_ms": 0.19, "calls": {"overhead_ms": 0.15, "excess_ms": -0.04, "bound_ms": 0.03},
             "block": {"overhead_ms": 1.6, "excess_ms": 0.25, "bound_ms": 0.5}}
    timed = {**base, "problem": {**base["problem"], "id": "44_x"}, "solution": {**base["solution"], "name": "fast"},
             "status": "ok", "flags": [], "timing": {"vouch": vouch}}
    untimed = {**base, "problem": {**base["problem"], "id": "44_x"}, "solution": {**base["solution"], "name": "wrong"},
               "status": "incorrect", "timing": {}}
    (tmp_path / "a.json").write_text(json.dumps(timed))
    (tmp_path / "b.json").write_text(json.dumps(untimed))
    (tmp_path / "run.json").write_text("{}")
    assert lane_clock.main([str(tmp_path / "none")]) == 2     # one line naming the folder
    assert "no such results folder" in capsys.readouterr().err
    assert lane_clock.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and "fast" in out[1] and "wrong" not in "".join(out)
    assert out[1].split()[7] == "-1.3333" and out[1].split()[15] == "0.5000" and out[1].split()[11] == "None"
    assert out[-1] == "1 pair(s); the largest share of a bound used: 0.50"


def test_lane_clock_recomputes_a_judgement_under_other_checks(tmp_path, capsys):
    """--set: each pair judged again from its recorded blocks, e.g. the cycle check on over a run made
    with it off (the handoff fixture's shape: fast calls, the work after each, every block's wall noisy)."""
    from tools import lane_clock

    from test_results import make_result
    base = make_result().to_dict()

    def blocks(ms, gap_ovh, wall_ovh):
        return [{"ms": 10 * (ms + wall_ovh), "calls": 10, "returns": 10, "inner_ovh_ms": 0.005, "inner_ms": ms + 0.005,
                 "gap_ovh_ms": gap_ovh, "gap_ms": ms + gap_ovh} for _ in range(10)]
    timing = {"solution": {"rounds": [[0.04] * 10] * 10, "lane_blocks": blocks(0.04, 2.1, 2.1)},
              "reference": {"rounds": [[1.8] * 10] * 10, "lane_blocks": blocks(1.8, 0.3, 1.5), "measured_in": "reference worker",
                            "reused": False},
              "vouch": {"ok": True, "reported_ms": 0.04, "calls": {"excess_ms": 0.0, "bound_ms": 0.1}}}
    record = {**base, "status": "ok", "flags": [], "timing": timing,
              "config": {**base["config"], "checks": {"timing_cycle": "off"}}, "env": {**base.get("env", {}), "device": "cpu"}}
    (tmp_path / "a.json").write_text(json.dumps(record))
    assert lane_clock.main([str(tmp_path), "--set", "checks.timing_cycle=on"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("with checks.timing_cycle=on: 1 of 1 pair(s) judged otherwise") and "(True -> False)" in out[-1]
    assert lane_clock.main([str(tmp_path), "--set", "checks.timing_cycle=off"]) == 0
    assert "0 of 1 pair(s) judged otherwise" in capsys.readouterr().out
    assert lane_clock.main([str(tmp_path), "--set", "timing.rounds=3"]) == 2
    assert "only checks.KEY=VALUE" in capsys.readouterr().err
    assert lane_clock.main([str(tmp_path), "--set", "checks.timing_cycel=on"]) == 2
    assert "did you mean 'checks.timing_cycle'" in capsys.readouterr().err


def test_clock_redteam_counts_a_flagged_fixture_as_caught_and_a_trusted_fast_one_as_not():
    from types import SimpleNamespace as NS
    from tools.clock_redteam import table

    def result(name, status, ms, flags=()):
        return NS(solution={"name": name}, status=NS(value=status), flags=list(flags), message="",
                  timing={"solution": {"median_ms": ms}, "vouch": {"reported_ms": ms}})
    twin = result("cheat_reference_output", "ok", 1.75)
    flagged = result("cheat_clock_event", "ok", 0.52, ["timing_untrusted"])
    lines, every = table([twin, flagged])
    assert every and " flag " in lines[2]
    lines, every = table([twin, flagged, result("cheat_clock_timer", "ok", 0.54)])
    assert not every and " NO " in lines[3]
    lines, every = table([twin, result("cheat_clock_host", "ok", 1.72)])   # within 10% of its twin
    assert every


def test_gpu_smoke_runs_the_smoke_set_unless_told_otherwise(tmp_path):
    from tools.gpu_smoke import SMOKE_TESTS, selection
    chosen, named = selection(False, "", "")
    assert chosen == SMOKE_TESTS and named.startswith("(the smoke set: test_sandbox, ")
    for path in SMOKE_TESTS:             # each file of the set holds tests marked gpu
        assert "pytest.mark.gpu" in (REPO_ROOT / path).read_text(), path
    assert selection(True, "", "") == ([], "(full)")
    assert selection(True, "tests/test_gpu.py -k fast", "")[0] == ["tests/test_gpu.py", "-k", "fast"]
    rest = tmp_path / "rest.txt"
    rest.write_text("tests/test_gpu.py::test_a\n\ntests/test_gpu.py::test_b\n")
    chosen, named = selection(False, "", str(rest))
    assert chosen == ["tests/test_gpu.py::test_a", "tests/test_gpu.py::test_b"] and named == f"(the 2 tests of {rest})"


def test_gpu_smoke_stopped_at_its_deadline_says_what_ran_and_lists_the_rest():
    from tools.gpu_smoke import stopped_part
    log = ("tests/test_gpu_lanes.py::test_one_lane_per_gpu SKIPPED (needs two GPUs)     [ 10%]\n"
           "tests/test_gpu_precision.py::test_red[half_mutate_input-input 0 was modified] PASSED [ 20%]\n"
           "tests/test_gpu_precision.py::test_b[57] FAILED                      [ 30%]\n"
           "tests/test_gpu_precision.py::test_b[65] ")
    collected = ["tests/test_gpu_lanes.py::test_one_lane_per_gpu",
                 "tests/test_gpu_precision.py::test_red[half_mutate_input-input 0 was modified]",
                 "tests/test_gpu_precision.py::test_b[57]", "tests/test_gpu_precision.py::test_b[65]",
                 "tests/test_gpu_precision.py::test_b[69]"]
    line, rest = stopped_part(log, collected, "tests/test_gpu_precision.py", 330)
    assert line == ("pytest -m gpu tests/test_gpu_precision.py: 1 passed, 1 failed, 1 skipped, "
                    "2 not reached by the deadline (330 s)")
    assert rest == collected[3:]       # the one running when stopped is run again


def test_bench_ray_builds_recipes_differ_so_that_each_builds(tmp_path):
    from tools.bench_ray_builds import recipes
    paths = recipes(tmp_path, 3, "k1")
    texts = [p.read_text() for p in paths]
    assert len(set(texts)) == 3 and all('name="elementwise_add_cpp_k1_' in t for t in texts)
    assert "+ 0.0f * 2.0f" in texts[2] and "ModelNew" in texts[0]


def test_corpus_verdicts_judges_only_what_a_run_judged(tmp_path, monkeypatch):
    """`judge --judged-in RUN`: the earlier tree judges the pairs a stopped batch judged (on the
    H200, a results file's `solution` is a record, not a name: the script that read it wrongly
    judged nothing)."""
    from tools import corpus_verdicts
    import harness.run.runner as runner

    from test_results import make_result
    base = make_result().to_dict()
    problems = tmp_path / "problems"
    problems.mkdir()
    lines = []
    for name in ("a_sol", "b_sol"):
        (problems / "1_Add.py").write_text("")
        (tmp_path / f"{name}.py").write_text("")
        lines.append(json.dumps({"problem": str(problems / "1_Add.py"), "file": str(tmp_path / f"{name}.py")}))
    subs = tmp_path / "subs.jsonl"
    subs.write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    (run / "1_Add-b_sol.json").write_text(json.dumps({**base, "problem": {**base["problem"], "id": "1_Add"},
                                                       "solution": {**base["solution"], "name": "b_sol"}}))
    judged = []
    monkeypatch.setattr(runner, "evaluate", lambda pairs, cfg, run_id: judged.extend(pairs) or [])
    root = str(REPO_ROOT)
    argv = ["judge", str(subs), "--tree", root, "--results-dir", str(tmp_path / "out"), "--run-id", "x"]
    assert corpus_verdicts.main(argv + ["--judged-in", str(run)]) == 0
    assert [(p.problem.id, p.solution.name) for p in judged] == [("1_Add", "b_sol")]
    judged.clear()
    assert corpus_verdicts.main(argv) == 0 and len(judged) == 2
    judged.clear()
    assert corpus_verdicts.main(argv + ["--not-judged-in", str(run)]) == 0     # a judge cut short goes on
    assert [(p.problem.id, p.solution.name) for p in judged] == [("1_Add", "a_sol")]
    assert corpus_verdicts.main(argv + ["--judged-in", str(tmp_path / "none")]) == 2
    assert corpus_verdicts.main(argv + ["--not-judged-in", str(tmp_path / "none")]) == 2


def test_corpus_verdicts_compares_two_runs_pair_by_pair(tmp_path, capsys):
    from tools import corpus_verdicts

    from test_results import make_result
    base = make_result().to_dict()

    def write(run, problem, name, status, message="m"):
        run.mkdir(exist_ok=True)
        result = {**base, "problem": {**base["problem"], "id": problem}, "solution": {**base["solution"], "name": name},
                  "status": status, "message": message}
        (run / f"{problem}-{name}.json").write_text(json.dumps(result))
        (run / "run.json").write_text("{}")
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "1_Add", "gpt_o1_x", "ok")
    write(b, "1_Add", "gpt_o1_x", "ok")
    write(a, "1_Add", "mut_y", "incorrect", "trial 0: wrong")
    write(b, "1_Add", "mut_y", "runtime_error", "illegal address")
    write(a, "2_Mul", "z", "ok")
    assert corpus_verdicts.main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "2 pair(s) in both runs: 1 with the same status, 1 differ"
    assert out[1] == "  1_Add/mut_y: incorrect / runtime_error" and "trial 0: wrong" in out[2]
    assert out[-1] == "only in A (1): 2_Mul/z"
    write(b, "1_Add", "mut_y", "incorrect")
    assert corpus_verdicts.main(["compare", str(a), str(b)]) == 0
    assert corpus_verdicts.main(["compare", str(a), str(tmp_path / "none")]) == 2
    capsys.readouterr()


def test_corpus_verdicts_keeps_a_run_as_a_verdicts_file_compared_like_a_run(tmp_path, capsys):
    from tools import corpus_verdicts

    from test_results import make_result
    base = make_result().to_dict()
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": "r1", "device": "cuda", "gpu_names": ["H"], "git": {"commit": "abc"}}))
    for problem, name, status in (("1_Add", "x", "ok"), ("1_Add", "y", "incorrect")):
        result = {**base, "problem": {**base["problem"], "id": problem}, "solution": {**base["solution"], "name": name},
                  "status": status, "message": "m" * 300}
        (run / f"{problem}-{name}.json").write_text(json.dumps(result))
    kept = tmp_path / "kept" / "r1.json"
    assert corpus_verdicts.main(["verdicts", str(run), "--out", str(kept), "--host", "an H100 host"]) == 0
    data = json.loads(kept.read_text())
    assert data["commit"] == "abc" and data["host"] == "an H100 host" and data["counts"] == {"incorrect": 1, "ok": 1}
    assert data["pairs"]["1_Add/y"] == {"status": "incorrect", "message": "m" * 200}
    capsys.readouterr()
    assert corpus_verdicts.main(["compare", str(kept), str(run)]) == 0
    assert capsys.readouterr().out.startswith("2 pair(s) in both runs: 2 with the same status, 0 differ")
    data["pairs"]["1_Add/x"]["status"] = "runtime_error"
    kept.write_text(json.dumps(data))
    assert corpus_verdicts.main(["compare", str(run), str(kept)]) == 1
    assert "  1_Add/x: ok / runtime_error" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("[]")
    assert corpus_verdicts.main(["compare", str(tmp_path / "bad.json"), str(run)]) == 2
    assert "not a verdicts file" in capsys.readouterr().err
    assert corpus_verdicts.main(["phases", str(kept)]) == 2


def test_corpus_phases_counts_a_shared_recipe_once_and_the_lanes_idle_time(tmp_path, capsys):
    from tools import corpus_verdicts

    from test_results import make_result
    base = make_result().to_dict()
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    lane = {"startup_s": 1.0, "timing_s": 2.0, "reference_s": 1.0}   # 4 s of the lane's time a pair
    for i, (key, cached, pch) in enumerate([("k1", False, True), ("k1", False, True), ("k2", True, False)]):
        build = {"extensions": [{"key": key, "cached": cached, "seconds": 30.0 + i, "cpu_s": 60.0}],
                 "log": "g++ " + ("-I/c/pch/abc " if pch else "") + "-c main.cpp"}
        result = {**base, "solution": {**base["solution"], "name": f"s{i}"}, "status": "ok", "build": build,
                  "phases": {**lane, "build_s": 30.0, "wall_s": 34.0},
                  "started_at": "2026-12-02T10:00:00+00:00", "finished_at": f"2026-12-02T10:00:{10 * (i + 1):02d}+00:00"}
        (run / f"p-s{i}.json").write_text(json.dumps(result))
    assert corpus_verdicts.main(["phases", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "3 solution(s): 3 ok"
    assert out[1] == "wall 30 s over 1 call(s): 360 an hour"          # first start to last finish
    assert out[2].startswith("recipes built 1: wall median 30.0 s, CPU-s median 60.0, sum 60;")
    assert out[2].endswith("precompiled header in 2 of 3 build logs")
    assert out[3] == "lane a pair: median 4.00 s, sum 12 s; lanes idle 60% of 1 x 30 s"
    # each pair's lane segment: its finish less wall_s - build_s (4 s): 6-10, 16-20, 26-30 s into the run
    assert out[4] == "the lane's first pair began 6.0 s into the run; after it 2 wait(s) over 0.3 s between pairs, 12.0 s in all"
    assert corpus_verdicts.main(["phases", str(run), "--walls", "40,50"]) == 0
    assert "wall 90 s over 2 call(s): 120 an hour" in capsys.readouterr().out
    for i, said in enumerate(["read lean", "compiled again with torch's header: cuda.cu(3): error: ..."]):
        result = json.loads((run / f"p-s{i}.json").read_text())
        result["build"]["extensions"][0].update(key=f"c{i}", cu_header=said)
        (run / f"p-s{i}.json").write_text(json.dumps(result))
    assert corpus_verdicts.main(["phases", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[2].endswith(
        "(build.cu_header) in 1 (the lean one in 1) of 2 recipes")
    for i, (nice, jobs) in enumerate([(10, 2), (19, 2)]):   # build.stagger's records
        result = json.loads((run / f"p-s{i}.json").read_text())
        result["build"]["extensions"][0].update(nice=nice, jobs=jobs)
        (run / f"p-s{i}.json").write_text(json.dumps(result))
    assert corpus_verdicts.main(["phases", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == ["compiles by nice: 10: 1, 19: 1", "compiles by jobs: 2: 2"]
    for i, end in enumerate(range(40, 90, 10), start=3):   # eight results, one finished each 10 s: the rate after the first two
        result = {**json.loads((run / "p-s2.json").read_text()), "finished_at": f"2026-12-02T10:0{end // 60}:{end % 60:02d}+00:00"}
        result["solution"]["name"] = f"s{i}"
        (run / f"p-s{i}.json").write_text(json.dumps(result))
    assert corpus_verdicts.main(["phases", str(run)]) == 0
    assert "after the first quarter: 5 more finished in the 50 s from finish 3 to the last: 360 an hour" in \
        capsys.readouterr().out.splitlines()
    assert corpus_verdicts.main(["phases", str(run), "--walls", "40,50"]) == 0   # a run over two calls: no such line
    assert "after the first quarter" not in capsys.readouterr().out


def test_ptx_diff_compares_entries_up_to_names_labels_and_register_numbers():
    from tools.ptx_diff import compare, entries
    head = ".visible .entry _ZN44_GLOBAL__N__{h}_11_dispatch_cu_{g}8kernel_{n}(\n.param .u64 _ZN44_GLOBAL__N__{h}_11_dispatch_cu_{g}8kernel_{n}_param_0\n)\n{{\n"
    body_a = ".reg .f32 %f<9>;\nmov.f32 %f3, 0f00000000;\nadd.f32 %f7, %f3, %f3;\n$L__BB12_4:\nbra $L__BB12_4;\n}\n"
    body_b = ".reg .f32 %f<12>;\nmov.f32 %f10, 0f00000000;\nadd.f32 %f2, %f10, %f10;\n$L__BB3_4:\nbra $L__BB3_4;\n}\n"
    body_c = ".reg .f32 %f<12>;\nmov.f32 %f10, 0f00000000;\nmul.f32 %f2, %f10, %f10;\n$L__BB3_4:\nbra $L__BB3_4;\n}\n"
    before = entries(head.format(h="1234abcd", g="9adf1c03", n="a") + body_a + head.format(h="1234abcd", g="9adf1c03", n="b")
                     + body_a + head.format(h="1234abcd", g="9adf1c03", n="gone") + body_a)
    after = entries(head.format(h="feedbeef", g="00112233", n="a") + body_b + head.format(h="feedbeef", g="00112233", n="b")
                    + body_c + head.format(h="feedbeef", g="00112233", n="new") + body_b)
    differ, renamed, gone, new, same = compare(before, after)
    assert same == 1                                    # another file hash, register and label numbers: the same code
    assert [n[-8:] for n in differ] == ["kernel_b"]     # add against mul
    assert [(a[-11:], b[-10:]) for a, b in renamed] == [("kernel_gone", "kernel_new")]   # the same code, renamed
    assert gone == new == []
    differ, renamed, gone, new, same = compare(before, entries(head.format(h="feedbeef", g="00112233", n="new") + body_c))
    assert renamed == [] and len(gone) == 3 and [n[-10:] for n in new] == ["kernel_new"]
    from tools.ptx_diff import shown
    b = [n for n in before if n.endswith("kernel_b")][0]
    lines = shown(before[b], after[b], 10)
    assert lines[0].startswith("@@") and "-add.f32 %f#1, %f#0, %f#0;" in lines and "+mul.f32 %f#1, %f#0, %f#0;" in lines
    assert shown(before[b], after[b], 2) == lines[:2] and shown(before[b], before[b], 5) == []


def test_host_cost_splits_a_calls_host_time_where_the_model_says_how(tmp_path, capsys):
    """tools/host_cost.py: the reference and a solution on the CPU, each a line of microseconds per
    call; the Python part (`_args`) and the binding's (`plan`) only for a model that has them."""
    from tools import host_cost
    solution = tmp_path / "py_add.py"
    solution.write_text("import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                        "    def _args(self, a, b):\n        return (a, b)\n\n"
                        "    def plan(self, a, b):\n        return list(self._args(a, b))\n\n"
                        "    def forward(self, a, b):\n        return a + b\n")
    assert host_cost.main(["elementwise_add", "--device", "cpu", "--calls", "5", "--repeats", "2",
                           "--solution", str(solution)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("elementwise_add on cpu: 5 calls a block, median of 2")
    head, reference, mine = lines[1].split(), lines[2].split(), lines[3].split()
    assert head[-5:] == ["issue", "drained", "device", "args", "plan"]
    assert reference[0] == "PyTorch" and reference[3:] == ["-", "-", "-"] and float(reference[1]) > 0
    assert mine[0] == "py_add" and mine[3] == "-" and all(float(x) > 0 for x in mine[1:3] + mine[4:])
    for dtype in ("bfloat16", "bf16"):            # a torch dtype's name or the precision's: both cast
        assert host_cost.main(["elementwise_add", "--device", "cpu", "--calls", "5", "--repeats", "2",
                               "--dtype", dtype, "--solution", str(solution)]) == 0
        assert capsys.readouterr().out.splitlines()[0].endswith(f", {dtype}: 5 calls a block, median of 2")


def test_cu_header_check_compares_host_functions_up_to_addresses_and_string_offsets(tmp_path):
    """tools/cu_header_check.py's comparison of two objects (g++ here; nvcc's host objects alike): a
    function that reads the same string from another offset is the same, one with another body is not."""
    import shutil
    import subprocess
    from tools import cu_header_check as check
    if not shutil.which("g++") or not shutil.which("objdump"):
        pytest.skip("needs g++ and objdump")
    sources = {"a": 'const char* pad() { return "padding first"; }\nconst char* f() { return "same"; }\n'
                    'int g(int x) { return x + 1; }\n',
               "b": 'const char* f() { return "same"; }\nint g(int x) { return x + 2; }\nint h() { return 0; }\n'}
    for name, text in sources.items():
        (tmp_path / f"{name}.cpp").write_text(text)
        subprocess.run(["g++", "-O0", "-c", f"{name}.cpp", "-o", f"{name}.o"], cwd=tmp_path, check=True)
    found = check.compare(tmp_path / "a.o", tmp_path / "b.o")
    assert found["functions"] == 2 and found["differ"] == ["_Z1gi"]        # f: the same string, another offset
    assert found["only_torch_header"] == 1 and found["only_this_header"] == 1
    assert found["kernels_same"] is False                                   # no device code to be the same
    assert check._in_std("void std::__cxx11::basic_string<char>::_M_construct<char const*>(char const*)")
    assert not check._in_std("matmul_cuda(at::Tensor, at::Tensor)") and not check._in_std("c10::SymNodeImpl::neg()")


def test_cu_header_check_takes_the_recipes_own_nvcc_command(tmp_path):
    from tools import cu_header_check as check
    from harness.compile.compiler import CU_HEADER
    (tmp_path / "build.ninja").write_text(
        "nvcc = /usr/local/cuda/bin/nvcc\n"
        f"cuda_cflags = -DX=1 -I/tmp/s/compile-only-stubs-abc -isystem /t/include -O3 -I{CU_HEADER}\n"
        "cuda_post_cflags = --compiler-options '-fPIC' -std=c++17\n")
    assert check.nvcc_command(tmp_path, tmp_path / "stubs") == [
        "/usr/local/cuda/bin/nvcc", "-DX=1", f"-I{tmp_path / 'stubs'}", "-isystem", "/t/include", "-O3",
        "--compiler-options", "-fPIC", "-std=c++17"]


def test_cpu_by_process_counts_each_kind_and_a_process_start_before_its_first_pause(tmp_path, capsys):
    """tools/cpu_by_process.py over real processes named as the harness's: a compile step, a worker under a
    lane that burns CPU, pauses, then burns again, and a worker outside a lane (a build step). Each lower
    bound is the CPU burnt less one interval and a tick: what a process spends after its last sample is
    its parent's (cutime), as the tool's docstring says (0.5 < 0.5 once in CI at f67dc38)."""
    import sys
    from tools.cpu_by_process import attribute, first_pause, main
    burn = "import sys, time\ndef burn(s):\n    t = time.process_time()\n    while time.process_time() - t < s: pass\n"
    worker = burn + "burn(0.4); time.sleep(1.6); burn(0.4)"
    lane = ("import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1], 'harness.run.worker'])")
    top = ("import subprocess, sys\n"
           f"procs = [subprocess.Popen([sys.executable, '-c', {burn + 'burn(0.6)'!r}, 'harness.compile.compiler']),\n"
           f"         subprocess.Popen([sys.executable, '-c', {lane!r}, {worker!r}, 'harness.run.lane']),\n"
           f"         subprocess.Popen([sys.executable, '-c', {burn + 'burn(0.3)'!r}, 'harness.run.worker'])]\n"
           "[p.wait() for p in procs]")
    out = tmp_path / "cpu.json"
    assert main(["record", str(out), "--interval", "0.1", "--", sys.executable, "-c", top]) == 0
    data = json.loads(out.read_text())
    kinds = attribute(data["processes"], data["root"])
    assert 0.49 <= kinds["compile_step"]["cpu_s"] < 1.2 and len(kinds["compile_step"]["processes"]) == 1
    assert 0.69 <= kinds["worker"]["cpu_s"] < 1.5 and len(kinds["lane"]["processes"]) == 1
    assert 0.19 <= kinds["build_step"]["cpu_s"] < 0.8
    (w,) = kinds["worker"]["processes"]
    assert 0.3 < first_pause(w["series"], 1.0, w["own"]) < 0.65 < w["own"]
    main(["report", str(out)])
    printed = capsys.readouterr().out
    assert re.search(r"^worker\s+[\d.]+\s+\d+%\s+1 ", printed, re.M) and "the rest" in printed


def test_cpu_by_process_counts_a_forked_step_by_the_name_it_gives_itself(tmp_path):
    """A step the fork server forks has the server's command line and names itself kb:compiler: the
    tool counts it as a compile step, the server's own CPU as the fork server's."""
    import sys
    from tools.cpu_by_process import attribute, main
    server = ("import ctypes, os, time\n"
              "def burn(s):\n    t = time.process_time()\n    while time.process_time() - t < s: pass\n"
              "burn(0.2)\npid = os.fork()\n"
              "if pid == 0:\n"
              "    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(b'kb:compiler'), 0, 0, 0)\n"
              "    burn(0.6)\n    os._exit(0)\n"
              "os.waitpid(pid, 0)\n")
    out = tmp_path / "cpu.json"
    assert main(["record", str(out), "--interval", "0.1", "--", sys.executable, "-c",
                 f"import subprocess, sys; subprocess.run([sys.executable, '-c', {server!r}, 'harness.isolate.forkserver'])"]) == 0
    kinds = attribute(json.loads(out.read_text())["processes"], json.loads(out.read_text())["root"])
    assert 0.4 < kinds["compile_step"]["cpu_s"] < 1.0 and len(kinds["compile_step"]["processes"]) == 1
    assert 0.1 < kinds["fork_server"]["cpu_s"] < 0.5


def test_cpu_by_process_passes_a_sigterm_on_and_still_writes_what_it_recorded(tmp_path):
    import signal
    import subprocess
    import sys
    import time
    out = tmp_path / "cpu.json"
    rec = subprocess.Popen([sys.executable, str(REPO_ROOT / "tools" / "cpu_by_process.py"), "record", str(out), "--",
                            sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(1.5)
    rec.send_signal(signal.SIGTERM)
    assert rec.wait(timeout=30) == -signal.SIGTERM
    data = json.loads(out.read_text())
    assert data["returncode"] == -signal.SIGTERM and data["span_s"] < 30 and data["processes"]


def test_the_device_scripts_parse_and_call_the_tools_as_they_are(tmp_path):
    """tools/device/*.sh run on lent GPU hosts, where a mistake costs device time: each parses
    (bash -n), and every option it passes to a repository tool is one that tool's --help names."""
    import re
    import subprocess
    import sys
    scripts = sorted((REPO_ROOT / "tools" / "device").glob("*.sh"))
    assert {s.name for s in scripts} >= {"corpus_run.sh", "kernel_tests.sh", "bf16_families.sh", "ncu_source.sh"}
    helps = {}
    for script in scripts:
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script.name
        text = script.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            if line.lstrip().startswith("#"):
                continue
            for tool, rest in re.findall(r"python (tools/\w+\.py|run_eval\.py)((?:(?! -- )(?! python )[^|;&>])*)", line):
                words, flags = rest.split(), re.findall(r"(?<!\S)(--[\w-]+)", rest)
                sub = words[0] if words and not words[0].startswith(("-", "$", '"', ".")) else ""
                key = (tool, sub)
                if flags and key not in helps:
                    argv = [sys.executable, str(REPO_ROOT / tool)] + ([sub] if key[1] else []) + ["--help"]
                    helps[key] = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT).stdout
                for flag in flags:
                    assert flag in helps[key], (script.name, tool, sub, flag)
    assert ("tools/corpus_verdicts.py", "phases") in helps and ("tools/gpu_smoke.py", "") in helps
