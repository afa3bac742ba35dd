from harness import leaderboard
from harness.results import Status
from test_results import make_result


def test_rows_show_speedup_only_for_correct_results():
    ok = make_result(Status.OK)
    bad = make_result(Status.INCORRECT)
    assert leaderboard.row(ok)[2:] == ["ok", "fp32", "1.00e-07", "2.000 ±1.000", "2.000 ±1.000", "2.000 ±1.000",
                                       "1.00x (vs fp32)", "library_passthrough"]
    assert leaderboard.row(bad)[-2] == "-"


def test_formats_and_summary():
    results = [make_result(Status.OK), make_result(Status.CRASHED)]
    assert leaderboard.markdown(results).startswith("| problem")
    assert leaderboard.to_csv(results).splitlines()[0] == ",".join(leaderboard.COLUMNS)
    assert "speedup" in leaderboard.table(results)
    assert leaderboard.summary(results) == {"ok": 1, "crashed": 1}
