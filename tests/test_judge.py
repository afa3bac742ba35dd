"""The lane's comparison out of device memory (harness/judge.py PairJudgement.compare): once more
with the cached ground truth dropped, then on the host; never the solution's fault."""
from types import SimpleNamespace

import torch

from harness import judge


def test_out_of_memory_while_comparing_drops_the_cache_then_compares_on_the_host(monkeypatch):
    calls = []

    def classify(out, truth, dtype, tolerances):
        calls.append(out.device.type)
        if len(calls) < 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return "fp32", "compared"

    monkeypatch.setattr(judge, "classify", classify)
    events = []
    lane = SimpleNamespace(cache=SimpleNamespace(clear=lambda: events.append("cache cleared")),
                           release=lambda force=False: events.append(f"released (force={force})"))
    pj = SimpleNamespace(judge=lane, on_host=0)
    out = truth = torch.zeros(4)
    assert judge.PairJudgement.compare(pj, out, truth, torch.float32, {}) == ("fp32", "compared")
    assert len(calls) == 3 and pj.on_host == 1
    assert events == ["cache cleared", "released (force=True)", "released (force=True)"]


def test_a_comparison_that_fits_is_made_once(monkeypatch):
    monkeypatch.setattr(judge, "classify", lambda *a: ("tf32", "once"))
    pj = SimpleNamespace(judge=None, on_host=0)
    assert judge.PairJudgement.compare(pj, torch.zeros(1), torch.zeros(1), torch.float32, {}) == ("tf32", "once")
    assert pj.on_host == 0
