"""Tensors handed from a worker to its lane: described as data, rebuilt and bounds-checked by the
lane (bytes on the CPU here; CUDA IPC across two processes on a GPU)."""
import subprocess
import sys
import textwrap

import pytest
import torch

from harness import REPO_ROOT
from harness.isolate.handoff import HandoffError, Imports, export, overlaps
from harness.isolate.isolation import child_env


@pytest.mark.parametrize("tensor", [
    torch.arange(24, dtype=torch.float32).reshape(4, 6).t(),          # not contiguous
    torch.rand(3, 5).to(torch.bfloat16),
    torch.tensor([True, False, True]),
    torch.empty(0, 7),
    torch.arange(10, dtype=torch.int64)[3:],                          # a storage offset
])
def test_bytes_round_trip(tensor):
    payload = []
    meta = export(tensor, payload)
    assert meta["kind"] == "bytes"
    with Imports("cpu") as imports:
        again = imports.tensor(meta, bytearray(b"".join(payload)))
        assert again.dtype == tensor.dtype and again.shape == tensor.shape and torch.equal(again, tensor)


def test_descriptions_that_do_not_fit_are_refused():
    payload = []
    meta = export(torch.rand(4, 4), payload)
    data = bytearray(b"".join(payload))
    with Imports("cpu") as imports:
        with pytest.raises(HandoffError, match="dtype"):
            imports.tensor({**meta, "dtype": "builtins.eval"}, data)
        with pytest.raises(HandoffError, match="outside the message"):
            imports.tensor({**meta, "nbytes": meta["nbytes"] + 4}, data)
        with pytest.raises(RuntimeError):  # a view reaching past its storage
            imports.tensor({**meta, "shape": [4, 5], "stride": [5, 1]}, data)
        with pytest.raises(HandoffError, match="kind"):
            imports.tensor({**meta, "kind": "pickle"}, data)


def test_overlap_needs_the_same_allocation_and_intersecting_bytes():
    assert overlaps(("a", 0, 16), ("a", 8, 24)) and not overlaps(("a", 0, 16), ("a", 16, 24))
    assert not overlaps(("a", 0, 16), ("b", 0, 16)) and not overlaps(None, ("a", 0, 1))


# A child process exports CUDA tensors (a view with an offset, and a second view of the same
# allocation) and waits; this process maps them, checks values and bounds, then lets it go.
CHILD = textwrap.dedent("""
    import json, sys, torch
    from harness.isolate.channel import Channel
    from harness.isolate.handoff import export
    channel = Channel.from_fd(int(sys.argv[1]))
    base = torch.arange(64, dtype=torch.float32, device="cuda").reshape(8, 8)
    views = [base[2:5, 1:7], base[4:6]]
    payload = []
    channel.send({"metas": [export(v, payload) for v in views]}, b"".join(payload))
    channel.recv()
""")


@pytest.mark.gpu
def test_cuda_ipc_views_of_another_process(tmp_path):
    from harness.isolate.channel import Channel
    mine, theirs = Channel.pair()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(theirs.fileno())], cwd=REPO_ROOT, env=child_env(),
                            pass_fds=(theirs.fileno(),))
    theirs.close()
    try:
        message, payload = mine.recv(timeout=120)
        metas = message["metas"]
        assert all(m["kind"] == "ipc" for m in metas)
        base = torch.arange(64, dtype=torch.float32, device="cuda").reshape(8, 8)
        with Imports("cuda") as imports:
            first = imports.tensor(metas[0], payload)
            assert torch.equal(first, base[2:5, 1:7])
            assert overlaps(imports.byte_range(metas[0]), imports.byte_range(metas[1]))
            with pytest.raises(HandoffError, match="outside its allocation"):
                imports.tensor({**metas[0], "storage_bytes": metas[0]["alloc_bytes"] + 4096}, payload)
            copy = first.clone()
        assert torch.equal(copy, base[2:5, 1:7])
    finally:
        mine.send({"op": "ack"})
        proc.wait(timeout=60)


def test_an_output_past_2_gib_crosses_as_bytes_on_the_cpu():
    """A CPU tensor goes as raw bytes in the message's payload: 2 GiB and more (problem 57's output
    is 2.2 GB) crossed as SystemError before (ctypes.string_at takes a C int)."""
    import torch

    from harness.isolate.handoff import Imports, export
    big = torch.empty((1 << 29) + 3, dtype=torch.float32)  # 2 GiB + 12 bytes
    big[:4] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    big[-1] = 7.0
    payload: list = []
    meta = export(big, payload)
    assert meta["kind"] == "bytes" and meta["nbytes"] == big.numel() * 4
    view = Imports("cpu").tensor(meta, b"".join(payload))
    assert view.shape == big.shape and view[:4].tolist() == [1.0, 2.0, 3.0, 4.0] and view[-1].item() == 7.0
