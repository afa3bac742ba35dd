"""A solution's DEVICES declaration (harness/core/solutions.py): read from its text, never by running
it; a run on another device records the pair as skipped, with nothing of it built or run."""
import pytest

from harness.core.config import load_config, with_overrides
from harness.core.errors import BadInput
from harness.core.problems import problem_from_path
from harness.core.results import Status
from harness.run.runner import evaluate
from harness.core.solutions import Pair, solution_from_path
from conftest import ADD_PROBLEM, FIXTURES

BODY = ("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n        return a + b\n")


def test_a_solution_declaring_cuda_is_skipped_unrun_on_the_cpu_and_one_declaring_the_cpu_runs(tmp_path):
    marker = tmp_path / "imported"
    trap = f"open({str(marker)!r}, 'w').write('ran')\n"   # the import would leave this behind
    (tmp_path / "gpu_only.py").write_text('DEVICES = ("cuda",)\n' + trap + BODY)
    (tmp_path / "cpu_too.py").write_text('DEVICES = ("cpu", "cuda")\n' + BODY)
    problem = problem_from_path(ADD_PROBLEM)
    gpu_only, cpu_too = (solution_from_path(tmp_path / f"{n}.py") for n in ("gpu_only", "cpu_too"))
    assert gpu_only.devices == ("cuda",) and gpu_only.to_dict()["devices"] == ["cuda"]
    assert gpu_only.off_device("cuda") == "" and "DEVICES = ('cuda',)" in gpu_only.off_device("cpu")
    cfg = with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                         {"results_dir": str(tmp_path / "r"), "timing.enabled": False})
    lines: list[str] = []
    results = {r.solution["name"]: r for r in evaluate([Pair(problem, gpu_only), Pair(problem, cpu_too)], cfg,
                                                       run_id="devices", out=lines.append)}
    skipped = results["gpu_only"]
    assert skipped.status is Status.SKIPPED and skipped.message.startswith("needs a CUDA device: the file declares")
    assert "this run is on the cpu" in skipped.message and not marker.exists()
    assert results["cpu_too"].status is Status.OK, results["cpu_too"].message
    assert any("1 written for another device (DEVICES)" in line for line in lines), lines


@pytest.mark.parametrize("literal", ['("tpu",)', '"cuda"', "()", "DEVICES_OF_MINE"])
def test_a_devices_value_that_is_not_a_tuple_of_cpu_and_cuda_is_one_line_naming_the_file(tmp_path, literal):
    (tmp_path / "bad.py").write_text(f"DEVICES = {literal}\n" + BODY)
    with pytest.raises(BadInput, match=r"bad.py:1: DEVICES must be a literal tuple of cpu, cuda, got "):
        solution_from_path(tmp_path / "bad.py")
