import ast

import pytest

from harness import REPO_ROOT
from harness.core import problems, solutions
from harness.core.errors import BadInput
from conftest import ADD_PROBLEM, FIXTURE_SOLUTIONS


def _pairs(problem_spec, solution_spec):
    selected = problems.select(problem_spec) if problem_spec else problems.select(None)
    return solutions.select_pairs(selected, solution_spec, problem_spec is not None, problems.discover())


def test_every_conv_problem_has_the_direct_solution():
    pairs = _pairs("conv_transpose2d", "direct")
    assert len(pairs) == len(problems.select("conv_transpose2d"))
    assert all(p.solution.path.parent.name == p.problem.id for p in pairs)


def test_solutions_by_name_and_all():
    assert [p.solution.name for p in _pairs("elementwise_add", None)] == ["cpp_add", "cuda_add"]
    assert [p.solution.name for p in _pairs("elementwise_add", "cpp_add")] == ["cpp_add"]
    with pytest.raises(BadInput, match="no solution named 'nope'"):
        _pairs("elementwise_add", "nope")


def test_solution_path_infers_its_problem():
    path = REPO_ROOT / "solutions" / "examples" / "elementwise_add" / "cpp_add.py"
    pairs = _pairs(None, str(path))
    assert [(p.problem.id, p.solution.name) for p in pairs] == [("elementwise_add", "cpp_add")]


def test_solution_path_outside_tree_needs_problem():
    path = str(FIXTURE_SOLUTIONS / "cpp_ok.py")
    with pytest.raises(BadInput, match="give --problem"):
        _pairs(None, path)
    assert [p.problem.id for p in _pairs(str(ADD_PROBLEM), path)] == ["elementwise_add"]


def test_missing_modelnew_is_bad_input():
    path = str(FIXTURE_SOLUTIONS / "no_modelnew.py")
    with pytest.raises(BadInput) as err:
        _pairs("elementwise_add", path)
    assert "no_modelnew.py" in str(err.value) and "ModelNew" in str(err.value)


def test_syntax_error_is_left_to_the_worker(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("def f(:\n")
    solutions.check_static(solutions.solution_from_path(path))  # no BadInput: the worker reports load_error


def test_top_level_names_cover_assignments_imports_and_blocks():
    tree = ast.parse("import a.b as c\nfrom x import ModelNew\nif True:\n    class K: pass\nZ = Y = 1\n")
    names, star = solutions.top_level_names(tree)
    assert {"c", "ModelNew", "K", "Z", "Y"} <= names and not star
    assert solutions.top_level_names(ast.parse("from m import *"))[1]
