from harness import REPO_ROOT
from harness.record import leaderboard
from harness.core.results import Status
from test_results import make_result


def test_rows_show_speedup_only_for_correct_results():
    ok = make_result(Status.OK)
    bad = make_result(Status.INCORRECT)
    assert leaderboard.row(ok)[2:] == ["ok", "fp32", "1.00e-07", "2.000 ±1.000", "2.000 ±1.000", "2.000 ±1.000",
                                       "1.00x (vs fp32)", "-", "library_passthrough"]
    assert leaderboard.row(bad)[-3] == "-"


def test_tables_say_how_far_from_the_floor_a_time_is():
    """Where the lane measured the problem's physical floor (problem_checks.floor), each correct
    pair's time over it: the run's tables, the leaderboard's rows and its data."""
    import dataclasses
    ok = dataclasses.replace(make_result(Status.OK), problem_checks={"floor": {"ms": 0.5}})
    assert leaderboard.x_floor(ok) == 4.0 and leaderboard.row(ok)[9] == "4.0"
    assert "x floor" in leaderboard.terminal_table([ok]).splitlines()[0] and " 4.0 " in leaderboard.terminal_table([ok])
    assert leaderboard.x_floor(dataclasses.replace(ok, status=Status.INCORRECT)) is None
    assert leaderboard.x_floor(make_result(Status.OK)) is None


def test_formats_and_summary():
    results = [make_result(Status.OK), make_result(Status.CRASHED)]
    assert leaderboard.markdown(results).startswith("| problem")
    assert leaderboard.to_csv(results).splitlines()[0] == ",".join(leaderboard.COLUMNS)
    assert "speedup" in leaderboard.table(results)
    assert leaderboard.summary(results) == {"ok": 1, "crashed": 1}


def test_the_terminal_table_fits_120_columns_and_wide_shows_everything():
    """The family's snapshot (KernelBench's long names, intervals, flags) and every status."""
    from harness.record.leaderboard import terminal_table
    from harness.core.store import load_run
    results = load_run(REPO_ROOT / "results" / "snapshots" / "2026-11-24-h200-split-family")
    narrow = terminal_table(results)
    assert max(len(line) for line in narrow.splitlines()) <= 120, narrow
    assert "81 conv_transpose_2d…" in narrow and "81_conv_transpose_2d_asymmetric" not in narrow
    wide = terminal_table(results, wide=True)
    assert "81_conv_transpose_2d_asymmetric_input_square_kernel___dilated____padded____strided__" in wide
    assert max(len(line) for line in wide.splitlines()) > 120


def test_a_speedup_whose_interval_spans_more_than_2x_is_noisy_not_a_figure():
    from harness.record.leaderboard import speedup_text
    assert speedup_text(8.12, [0.30, 16.06]) == "noisy [0.30-16.06]"
    assert speedup_text(2.04, [1.97, 2.08]) == "2.04x [1.97-2.08]"
    assert speedup_text(1.5, None) == "1.50x" and speedup_text(None, [1, 3]) == "-"


def test_the_speedup_lies_inside_its_own_interval():
    """pipeline.speedup widens a bootstrap interval that misses the whole-sample ratio of medians."""
    from harness.run.pipeline import speedup
    ref = [[1.0], [1.0], [1.0], [9.0], [9.0]]
    sol = [[1.0], [1.0], [1.0], [1.0], [1.0]]
    timing = {"reference": {"median_ms": 5.0, "rounds": ref}, "solution": {"median_ms": 1.0, "rounds": sol}}
    got = speedup(timing, "tf32", "fp32")
    low, high = got["speedup_ci"]
    assert low <= got["speedup"] <= high


def test_the_interval_includes_the_process_term():
    """timing.process_term widens the rounds' interval at each end and is recorded with it."""
    from harness.run.pipeline import speedup
    ref = [[2.0 + 0.01 * i] for i in range(10)]
    sol = [[1.0 + 0.004 * ((i * 7) % 10)] for i in range(10)]
    timing = {"reference": {"median_ms": 2.05, "rounds": ref}, "solution": {"median_ms": 1.02, "rounds": sol}}
    bare = speedup(timing, "tf32", "fp32")
    wide = speedup(timing, "tf32", "fp32", process_term=0.01)
    assert wide["process_term"] == 0.01 and bare["process_term"] == 0.0
    assert abs(wide["speedup_ci"][0] - bare["speedup_ci"][0] / 1.01) < 1e-4
    assert abs(wide["speedup_ci"][1] - bare["speedup_ci"][1] * 1.01) < 1e-4
    assert wide["speedup"] == bare["speedup"]
