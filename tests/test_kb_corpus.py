"""tools/kb_corpus.py on two small git repositories laid out as KernelBench's and its public
leaderboard's: which solutions it takes, the mutants, the byte-for-byte problem check, the sample,
and that `run_eval.py batch` accepts what it writes."""
import json
import subprocess

import pytest

from tools import kb_corpus

PROBLEM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return a + b

def get_inputs():
    return [torch.randn(4), torch.randn(4)]

def get_init_inputs():
    return []
"""
SOLUTION = """import torch
import torch.nn as nn

src = "__global__ void k(float* o) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; o[i] = {v}; }}"

class ModelNew(nn.Module):
    def forward(self, a, b):
        return a + b
"""


def git_repo(path, files):
    path.mkdir()
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    run = lambda *a: subprocess.run(["git", "-C", str(path), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    run("add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    return str(path), subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                                     text=True).stdout.strip()


@pytest.fixture
def repos(tmp_path):
    kb = git_repo(tmp_path / "kb", {"KernelBench/level1/1_Add.py": PROBLEM, "KernelBench/level1/2_Other.py": PROBLEM,
                                    "KernelBench/level2/1_Fused.py": PROBLEM})
    board = {"Level 1: 1_Add": [{"display_name": "gpt-o1", "torch_speedup": 1.5, "file": "a"},
                                {"display_name": "llama-3.1-405b", "torch_speedup": 0.5, "file": "b"}],
             "Level 1: 2_Other": [{"display_name": "gpt-4o", "torch_speedup": 0.9, "file": "c"}],
             "Level 2: 1_Fused": [{"display_name": "claude-3.5-sonnet", "torch_speedup": 1.1, "file": "d"}]}
    files = {"docs/assets/data.json": json.dumps(board),
             "docs/assets/problems/l1_p1.py": PROBLEM, "docs/assets/problems/l1_p2.py": PROBLEM,
             "docs/assets/problems/l2_p1.py": PROBLEM,
             "docs/assets/solutions/a.py": SOLUTION.format(v=1), "docs/assets/solutions/b.py": SOLUTION.format(v=1),
             "docs/assets/solutions/c.py": SOLUTION.format(v=3), "docs/assets/solutions/d.py": SOLUTION.format(v=4)}
    lb = git_repo(tmp_path / "lb", files)
    return kb, lb


def test_the_corpus_takes_each_text_once_adds_its_mutants_and_batch_accepts_it(repos, tmp_path):
    (kb, kbc), (lb, lbc) = repos
    out = tmp_path / "corpus"
    m = kb_corpus.build(kb, lb, out, {1, 2}, 0, 0.4, 0, commits=(kbc, lbc))
    lines = [json.loads(x) for x in (out / "submissions.jsonl").read_text().splitlines()]
    assert m["upstream"] == 3 and m["mutants"] == 3 and m["solutions"] == 6    # b is a's text: left out
    assert m["by_level"] == {"1": 4, "2": 2} and m["problems"] == 3
    mutants = [x for x in lines if x["tag"]["origin"] == "mutant"]
    for x in mutants:
        text = open(x["file"]).read()
        assert "(threadIdx.x + 1)" in text and text.count("threadIdx.x") == 1 and "_mut_" in x["name"]
        assert x["tag"]["mutant_of"] in "acd"
    assert (out / "problems" / "level2" / "1_Fused.py").read_text() == PROBLEM
    from harness.cli.batch import accept
    accepted, refused = accept(lines, tmp_path / "texts")
    assert not refused and len(accepted) == 6
    assert {a.pair.problem.id for a in accepted} == {"1_Add", "2_Other", "1_Fused"}


def test_a_sample_keeps_the_levels_in_proportion_and_the_mutant_share(repos, tmp_path):
    (kb, kbc), (lb, lbc) = repos
    m = kb_corpus.build(kb, lb, tmp_path / "c", {1, 2}, 4, 0.5, 0, commits=(kbc, lbc))
    assert (m["upstream"], m["mutants"], m["solutions"]) == (2, 2, 4)
    again = kb_corpus.build(kb, lb, tmp_path / "d", {1, 2}, 4, 0.5, 0, commits=(kbc, lbc))
    assert (tmp_path / "c" / "submissions.jsonl").read_text().replace("/c/", "/d/") == \
        (tmp_path / "d" / "submissions.jsonl").read_text()    # the same seed, the same sample
    assert again == m


def test_a_problem_file_that_is_not_the_one_the_solutions_were_written_for_is_refused(tmp_path):
    kb = git_repo(tmp_path / "kb", {"KernelBench/level1/1_Add.py": PROBLEM.replace("4", "8")})
    lb = git_repo(tmp_path / "lb", {"docs/assets/data.json": json.dumps(
        {"Level 1: 1_Add": [{"display_name": "gpt-o1", "torch_speedup": 1.5, "file": "a"}]}),
        "docs/assets/problems/l1_p1.py": PROBLEM, "docs/assets/solutions/a.py": SOLUTION.format(v=1)})
    with pytest.raises(kb_corpus.CorpusError, match="differs from the leaderboard's"):
        kb_corpus.build(kb[0], lb[0], tmp_path / "c", {1}, 0, 0.4, 0, commits=(kb[1], lb[1]))
    assert kb_corpus.main(["--out", str(tmp_path / "x"), "--levels", "1,7"]) == 2
