"""The library share of a call (harness/verdict/libshare.py): operators timed through a dispatch mode."""
import torch

from harness.verdict.libshare import is_library_op, measure, op_name


def test_library_operators_are_recognised():
    for name in ("aten::convolution", "aten::cudnn_convolution_transpose", "aten::addmm", "aten::mm",
                 "aten::_scaled_dot_product_flash_attention", "aten::_fft_r2c", "aten::bmm"):
        assert is_library_op(name, "cuda"), name
    for name in ("aten::add", "aten::empty", "aten::copy_", "aten::sum", "aten::commit"):
        assert not is_library_op(name, "cuda"), name
    # on the CPU every compute operator is library work, allocation and views are not
    assert is_library_op("aten::add", "cpu") and not is_library_op("aten::empty_like", "cpu")
    assert op_name(torch.ops.aten.add.Tensor) == "aten::add"


def test_a_call_through_aten_is_library_work_on_the_cpu():
    measure(lambda: torch.ones(2) * 2, "cpu", lambda: None)  # the dispatch mode's first use costs most of a second
    a, b = torch.rand(512, 512), torch.rand(512, 512)
    summary = measure(lambda: torch.mm(a, b) + a, "cpu", lambda: None)
    assert summary["share"] > 0.5 and summary["total_us"] > 0
    assert {t["name"] for t in summary["top"]} >= {"aten::mm", "aten::add"}


def test_a_call_that_only_allocates_is_not():
    a = torch.rand(256, 256)
    summary = measure(lambda: torch.empty_like(a), "cpu", lambda: None)
    assert summary["share"] < 0.5 and all(not t["library"] for t in summary["top"])
