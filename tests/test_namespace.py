"""KernelBench's namespace (issue 39): a solution runs with a copy of its problem's names, through
the real pipeline on the CPU: a constant, torch and nn unimported, a helper, a rebinding that
changes nothing in the problem; the result notes which names it used."""
import pytest

from harness.core.config import load_config, with_overrides
from harness.core.problems import problem_from_path
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, problem_names_used, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES, FIXTURE_SOLUTIONS

NS = FIXTURES / "problems" / "ns_problem.py"
NAMES = ["ns_constant", "ns_torch_nn", "ns_helper", "ns_rebind"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(tmp_path_factory.mktemp("results"))})
    pairs = [Pair(problem_from_path(NS), solution_from_path(FIXTURE_SOLUTIONS / f"{n}.py")) for n in NAMES]
    pairs.append(Pair(problem_from_path(ADD_PROBLEM), solution_from_path(FIXTURE_SOLUTIONS / "ns_add_three_lines.py")))
    return {r.solution["name"]: r for r in evaluate(pairs, cfg, run_id="ns", out=lambda line: None)}


@pytest.mark.parametrize("name, used", [("ns_constant", ["scale"]), ("ns_torch_nn", ["nn", "scale", "torch"]),
                                        ("ns_helper", ["blend"]), ("ns_add_three_lines", ["nn", "size"])])
def test_a_solution_may_use_its_problems_names(run, name, used):
    r = run[name]
    assert r.status is Status.OK, r.message
    assert r.solution["problem_names"] == used
    assert f"note: uses the problem's names: {', '.join(used)}" in r.message


def test_rebinding_a_problem_name_changes_only_the_solutions_copy(run):
    r = run["ns_rebind"]
    assert r.status is Status.OK, r.message  # the reference still blends with scale 2, on inputs of 4096
    assert r.correctness["outputs"][0]["numel"] == 4096
    assert "problem_names" not in r.solution  # it binds both names itself


def test_names_a_solution_binds_itself_are_not_the_problems(tmp_path):
    solution = tmp_path / "s.py"
    solution.write_text("import torch\nfrom torch import nn\n\ndef f(size):\n    return size\n\n"
                        "class ModelNew(nn.Module):\n    def forward(self, a, b):\n"
                        "        scale = 3\n        return a * scale + blend(a, b) + torch.ones(1)\n")
    assert problem_names_used(solution, NS) == ["blend"]
