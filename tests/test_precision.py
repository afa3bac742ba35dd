"""Runs in fp16 and bf16 (--precision): the classes and baselines each run accepts, the cast of
inputs and models, solutions that declare their precisions, and the CPU pipeline in half
precision with correct, wrong and cheating solutions and a reference that cannot run in bf16.
(The tolerances' calibration: tests/test_calibration.py.)"""
import dataclasses
import json
import textwrap

import pytest
import torch

from harness.core import precision
from harness.core.config import load_config, with_overrides
from harness.core.errors import BadInput
from harness.record.leaderboard import board_data
from harness.core.problems import construct, make_inputs, problem_from_path
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, select_pairs, solution_from_path
from harness.record.standings import board_of, boards, gather, select, summarize
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS


def test_each_run_accepts_its_own_class_and_fp32_and_times_them_against_their_baselines():
    assert precision.classes("fp32") == ("fp32", "tf32")
    assert precision.classes("fp16") == ("fp32", "fp16")
    assert precision.classes("bf16") == ("fp32", "bf16")
    assert precision.baseline("fp32", "tf32") == "reference" and precision.baseline("fp32", "fp32") == "reference_fp32"
    assert precision.baseline("bf16", "bf16") == "reference" and precision.baseline("bf16", "fp32") == "reference_strict"
    assert precision.loosest(["fp32", "bf16", "fp32"], "bf16") == "bf16"
    assert precision.casts("fp32") is None and precision.casts("bf16") == "bfloat16"


def test_the_classes_tolerances_are_ordered_as_the_runs_assume():
    """A run's classes go from strict to loose, and fp16 is stricter than tf32 in relative L2:
    offering tf32 to an fp16 run would let bf16 arithmetic pass there."""
    c = load_config(None).correctness
    for run in precision.PRECISIONS:
        tols = [getattr(c, name) for name in precision.classes(run)]
        assert all(a.rel_l2 < b.rel_l2 and a.rtol <= b.rtol for a, b in zip(tols, tols[1:]))
    assert c.fp16.rel_l2 < c.tf32.rel_l2 < c.bf16.rel_l2


class WithBuffers(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("steps", torch.arange(3))
        self.register_buffer("scale", scale)


def test_a_half_run_casts_floating_inputs_parameters_and_buffers_and_nothing_else():
    module = type("M", (), {"get_inputs": staticmethod(lambda: [torch.randn(3), torch.arange(3), 2.5])})
    x, idx, scalar = make_inputs(module, 7, "cpu", "bfloat16")
    assert x.dtype == torch.bfloat16 and idx.dtype == torch.int64 and scalar == 2.5
    assert torch.equal(x, make_inputs(module, 7, "cpu")[0].to(torch.bfloat16))  # the same draw, rounded
    assert make_inputs(module, 7, "cpu")[0].dtype == torch.float32  # fp32 runs cast nothing
    model = construct(WithBuffers, [torch.ones(2, dtype=torch.float64)], 3, "cpu", dtype="float16")
    assert model.lin.weight.dtype == torch.float16 and model.scale.dtype == torch.float16
    assert model.steps.dtype == torch.int64
    plain = construct(WithBuffers, [torch.ones(2, dtype=torch.float64)], 3, "cpu")
    assert plain.scale.dtype == torch.float64 and torch.equal(plain.lin.weight.half(), model.lin.weight)


def test_solutions_declare_their_precisions_and_are_paired_only_in_those(tmp_path):
    root = tmp_path / "solutions"
    folder = root / "examples" / "elementwise_add"
    folder.mkdir(parents=True)
    body = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
    (folder / "any.py").write_text(body)
    (folder / "only_bf16.py").write_text('PRECISIONS = ("bf16",)\n' + body)
    problem = problem_from_path(ADD_PROBLEM)
    names = lambda run: sorted(p.solution.name for p in select_pairs([problem], None, True, [problem], root, run))  # noqa: E731
    assert names("fp32") == ["any"] and names("bf16") == ["any", "only_bf16"]
    assert solution_from_path(folder / "only_bf16.py").to_dict()["precisions"] == ["bf16"]
    with pytest.raises(BadInput, match="written for bf16 .*--precision bf16"):
        select_pairs([problem], str(folder / "only_bf16.py"), True, [problem], root, "fp16")
    (folder / "bad.py").write_text('PRECISIONS = ("fp8",)\n' + body)
    with pytest.raises(BadInput, match=r"bad.py:1: PRECISIONS must be a literal tuple of fp32, fp16, bf16"):
        solution_from_path(folder / "bad.py")


def test_the_repository_pairs_fast_bf16_in_bf16_runs_and_the_others_in_fp32():
    from harness.core import problems, solutions
    family = problems.select("conv_transpose2d")
    bf16 = solutions.select_pairs(family, None, True, problems.discover(), precision="bf16")
    fp32 = solutions.select_pairs(family, None, True, problems.discover(), precision="fp32")
    assert {p.solution.name for p in bf16} == {"fast_bf16"} and len(bf16) == len(family)
    assert {p.solution.name for p in fp32} == {"direct", "fast", "fast_fp32"}


def test_nan_poison_is_nan_in_both_half_types():
    """guards.poison_free_memory fills with 0xFF bytes: NaN in every floating type."""
    ones = torch.full((8,), 255, dtype=torch.uint8)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        assert bool(torch.isnan(ones.view(dtype)).all())


HALF_NAMES = ["half_add", "half_as_bf16", "half_mutate_input", "cheat_zeros", "cheat_inplace_alias", "cheat_empty"]


@pytest.fixture(scope="module")
def half_runs(tmp_path_factory):
    """The elementwise_add problem in fp16 and in bf16, on the CPU, one run each."""
    results_dir = tmp_path_factory.mktemp("results")
    out = {}
    for run in ("fp16", "bf16"):
        cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                             {"results_dir": str(results_dir), "precision": run})
        problem = problem_from_path(ADD_PROBLEM)
        pairs = [Pair(problem, solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in HALF_NAMES]
        pairs.append(Pair(problem_from_path(FIXTURES / "problems" / "add_no_bf16.py"),
                          solution_from_path(FIXTURE_SOLUTIONS / "half_add.py")))
        results = evaluate(pairs, cfg, run_id=run, out=lambda line: None)
        out[run] = {(r.problem["id"], r.solution["name"]): r for r in results}
    return out, results_dir


@pytest.mark.parametrize("run", ["fp16", "bf16"])
def test_a_correct_half_solution_earns_its_runs_class_against_the_default_baseline(half_runs, run):
    r = half_runs[0][run][("elementwise_add", "half_add")]
    assert r.status is Status.OK, r.message
    assert r.precision == run and r.config["precision"] == run
    assert r.correctness["precision"] == run and r.message.startswith(f"{run} class")
    assert r.correctness["min_margin"] >= 10  # fp32 math rounded once
    assert set(r.correctness["tolerances"]) == {"fp32", run}
    assert r.timing["baseline"] == "reference" and "reference_strict" in r.timing


def test_bf16_arithmetic_claimed_as_fp16_fails_the_fp16_class_and_passes_bf16(half_runs):
    by = half_runs[0]
    wrong = by["fp16"][("elementwise_add", "half_as_bf16")]
    assert wrong.status is Status.INCORRECT and "rounding-like" in wrong.message, wrong.message
    assert by["bf16"][("elementwise_add", "half_as_bf16")].status is Status.OK  # bf16 math is bf16's own


@pytest.mark.parametrize("run", ["fp16", "bf16"])
@pytest.mark.parametrize("name, says", [("cheat_zeros", "elements outside"), ("cheat_empty", "outside"),
                                        ("half_mutate_input", "input 0 was modified"),
                                        ("cheat_inplace_alias", "shares memory with input 0")])
def test_the_checks_catch_the_cheats_in_half_precision(half_runs, run, name, says):
    r = half_runs[0][run][("elementwise_add", name)]
    assert r.status is Status.INCORRECT and says in r.message, r.message


def test_a_reference_that_cannot_run_in_bf16_is_the_references_failure_naming_the_dtype(half_runs):
    by = half_runs[0]
    r = by["bf16"][("add_no_bf16", "half_add")]
    assert r.status is Status.HARNESS_ERROR and r.phase == "reference"
    assert "could not be run and timed in bf16" in r.message and "not the solution's fault" in r.message
    assert "NotImplementedError" in r.message
    assert by["fp16"][("add_no_bf16", "half_add")].status is Status.OK


def test_results_of_different_precisions_are_never_ranked_together(half_runs):
    _, results_dir = half_runs
    entries = select(gather([results_dir], warn=lambda line: None))
    assert sorted({board_of(e.result) for e in entries}) == ["CPU, bf16", "CPU, fp16"]
    names = [b.gpu for b in boards(entries)]
    assert names == ["CPU, bf16", "CPU, fp16"]
    rows = {(s["solution"], s["gpu"]): s for s in summarize(entries)}
    assert rows[("half_add", "CPU, bf16")]["bf16"]["correct"] == 0.5  # 2 problems, one reference failed
    data = board_data(boards(entries), summarize(entries))
    first = data["boards"][0]["problems"]["elementwise_add"]["ranked"][0]
    assert first["precision"] == "bf16" and first["class"] == "bf16"
    json.dumps(data)


def test_an_unknown_precision_in_a_config_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent("""\
        precision: fp8
    """))
    with pytest.raises(BadInput, match="precision must be one of fp32, fp16, bf16, got 'fp8'") as exc:
        load_config(path)
    assert str(path) in str(exc.value)


def test_a_half_runs_header_and_table_name_its_precision(tmp_path):
    lines = []
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(tmp_path), "precision": "bf16"})
    problem = problem_from_path(ADD_PROBLEM)
    results = evaluate([Pair(problem, solution_from_path(FIXTURE_SOLUTIONS / "half_add.py"))], cfg, run_id="b",
                       out=lines.append)
    assert any(" in bf16 on cpu" in line for line in lines), lines
    from harness.record.leaderboard import table
    assert table(results).splitlines()[0].startswith("precision bf16: ")
    fp32 = [dataclasses.replace(r, precision="fp32") for r in results]
    assert table(fp32).splitlines()[0].startswith("problem")  # an fp32 table has no such line


def test_the_example_solutions_declare_fp32_and_are_left_out_of_half_runs():
    from harness.core import problems, solutions
    for spec in ("elementwise_add", "softmax"):
        selected = problems.select(spec)
        assert {p.solution.precisions for p in solutions.select_pairs(selected, None, True, problems.discover())} \
            == {("fp32",)}
        with pytest.raises(BadInput, match="written for fp32"):
            solutions.select_pairs(selected, None, True, problems.discover(), precision="bf16")
