"""A training loop's entry point (harness/cli/batch.py, run_eval.py batch): solutions as texts or
files, each with its problem, judged on the main command's pipeline; each result handed back with
its tag once it is stored; a submission that cannot be judged answered at once as bad_input while
the others are judged; --resume answers the recorded ones from the run's results."""
import json
import os
import subprocess
import sys

from harness import REPO_ROOT
from harness.core.config import load_config, with_overrides
from harness.core.results import Status
from harness.core.store import load_run
from harness.cli.batch import judge_batch
from conftest import FIXTURES, FIXTURE_SOLUTIONS


def config(tmp_path):
    return with_overrides(load_config(FIXTURES / "configs" / "fast.yaml"),
                          {"results_dir": str(tmp_path / "results")})


def test_a_batch_streams_each_verdict_with_its_tag_and_refuses_only_what_it_cannot_judge(tmp_path):
    ok_text = (REPO_ROOT / "solutions" / "examples" / "elementwise_add" / "cpp_add.py").read_text()
    submissions = [
        {"problem": "elementwise_add", "source": ok_text, "tag": {"sample": 1}},
        {"problem": "elementwise_add", "file": str(FIXTURE_SOLUTIONS / "cpp_wrong.py"), "tag": "w"},
        {"problem": "no_such_problem", "source": ok_text, "tag": "nope"},
        {"problem": "elementwise_add", "source": ok_text, "name": "s00000", "tag": "again"},   # s00000 is taken
        {"problem": "elementwise_add", "tag": "neither"},
        {"problem": "elementwise_add", "source": ok_text, "name": "same_text", "tag": 5},
    ]
    cfg = config(tmp_path)
    lines = list(judge_batch(submissions, cfg, run_id="b1"))
    by_tag = {json.dumps(line["tag"]): line for line in lines}
    assert len(lines) == len(submissions)
    assert [line["status"] for line in lines[:3]] == ["bad_input"] * 3    # answered before any is judged
    assert "no_such_problem" in by_tag['"nope"']["message"] and by_tag['"nope"']["message"].startswith("submission 2:")
    assert "used twice" in by_tag['"again"']["message"] and "exactly one of" in by_tag['"neither"']["message"]
    ok, wrong, twin = by_tag['{"sample": 1}'], by_tag['"w"'], by_tag["5"]
    assert ok["status"] == "ok" and ok["passed"] and ok["solution"] == "s00000" and ok["index"] == 0
    assert ok["speedup"] > 0 and len(ok["speedup_ci"]) == 2 and ok["ms"] > 0 and ok["ref_ms"] > 0
    assert twin["status"] == "ok" and twin["solution"] == "same_text"
    assert wrong["status"] == "incorrect" and not wrong["passed"] and wrong["solution"] == "cpp_wrong"
    stored = {r.solution["name"]: r for r in load_run(tmp_path / "results" / "b1")}
    assert set(stored) == {"s00000", "cpp_wrong", "same_text"} and stored["cpp_wrong"].status is Status.INCORRECT
    # identical texts: one build step's libraries, the second found in the build cache
    assert stored["same_text"].build["extensions"][0]["key"] == stored["s00000"].build["extensions"][0]["key"]

    # resumed: the recorded ones are answered from the run's results, nothing is judged again
    again = list(judge_batch(submissions[:2], cfg, run_id="b1", resume=True, full=True))
    assert sorted(line["status"] for line in again) == ["incorrect", "ok"]
    assert all(line["result"]["run_id"] == "b1" for line in again)
    assert {line["result"]["finished_at"] for line in again} == {stored["s00000"].finished_at,
                                                                 stored["cpp_wrong"].finished_at}


def test_the_command_reads_json_lines_and_exits_2_when_one_cannot_be_judged(tmp_path):
    ok_text = (REPO_ROOT / "solutions" / "examples" / "elementwise_add" / "cpp_add.py").read_text()
    text = "\n".join([json.dumps({"problem": "elementwise_add", "source": ok_text, "tag": 7}), "{not json", ""])
    command = [sys.executable, "run_eval.py", "batch", "-", "--config", str(FIXTURES / "configs" / "fast.yaml"),
               "--results-dir", str(tmp_path / "results"), "--run-id", "cli"]
    proc = subprocess.run(command, cwd=REPO_ROOT, input=text, capture_output=True, text=True, timeout=900)
    lines = [json.loads(raw) for raw in proc.stdout.splitlines()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert lines[0]["status"] == "bad_input" and lines[0]["message"].startswith("<stdin>:2: not a JSON object")
    assert lines[1]["tag"] == 7 and lines[1]["status"] == "ok", lines
    assert "results: " in proc.stderr


def test_a_text_written_for_another_precision_is_refused_saying_so(tmp_path):
    from harness.cli.batch import accept
    text = 'PRECISIONS = ("bf16",)\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    pass\n'
    accepted, refused = accept([{"problem": "elementwise_add", "source": text, "tag": 3}], tmp_path, "fp32")
    assert not accepted and refused[0]["tag"] == 3 and "written for bf16" in refused[0]["message"]
    accepted, refused = accept([{"problem": "elementwise_add", "source": text}], tmp_path, "bf16")
    assert len(accepted) == 1 and not refused and accepted[0].pair.solution.path.read_text() == text


def test_build_stagger_gives_the_first_build_the_larger_share(tmp_path):
    """build.stagger on: a run's builds at priorities by their place (placement.build_nice: 10 for
    the first, 19 for the last of a wave), which their compilers keep (off: 10 more than the build
    thread, tests/test_pipeline_cpu.py). Each build's compilers' nice is in its record."""
    import uuid
    from harness.run.placement import build_nice
    assert [build_nice(r, 15) for r in (0, 7, 14, 30)] == [10, 14, 19, 19] and build_nice(0, 1) == 10
    base = (REPO_ROOT / "solutions" / "examples" / "elementwise_add" / "cpp_add.py").read_text()
    texts = [base.replace('cpp_source = r"""', f'cpp_source = r"""// {uuid.uuid4().hex}', 1)
             for _ in range(2)]   # new C++ sources: compiled, not cached
    cfg = with_overrides(config(tmp_path), {"build.stagger": "on", "build.jobs": 2, "timing.enabled": False})
    lines = list(judge_batch([{"problem": "elementwise_add", "source": t} for t in texts], cfg, run_id="st",
                             full=True))
    assert [line["status"] for line in lines] == ["ok", "ok"], lines
    by_name = {line["solution"]: line["result"]["build"]["extensions"][0] for line in lines}
    assert [by_name[name]["nice"] for name in ("s00000", "s00001")] == [10, 19], by_name   # places 0 and 1 of 2
    # and each recipe's two compiles side by side (MAX_JOBS at least 2: on 2 cores one each would share them)
    from harness.run.placement import build_jobs
    jobs = build_jobs(os.cpu_count() or 1, 2, True)
    assert jobs >= 2 and [by_name[name]["jobs"] for name in ("s00000", "s00001")] == [jobs, jobs], by_name
    assert (build_jobs(16, 15, True), build_jobs(16, 15, False), build_jobs(16, 4, True), build_jobs(2, 8, False)) \
        == (2, 1, 4, 1)
