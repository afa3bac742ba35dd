import torch

from harness.guards import aliased_input, cpu_op_share, is_library_kernel, library_share, poison_free_memory, tensor_digest
from harness.pipeline import make_seeds


def test_library_kernels_are_recognised_and_own_kernels_are_not():
    assert is_library_kernel("void cudnn::engines_precompiled::nchwToNhwcKernel<float>")
    assert is_library_kernel("sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw")
    assert is_library_kernel("void at::native::im2col_kernel<float>(long, float const*)")
    assert not is_library_kernel("void conv_transpose2d_direct_kernel<float>(float const*, float const*)")
    assert not is_library_kernel("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>")


def test_library_share_and_cpu_op_share():
    s = library_share([("sm90_xmma_fprop", 90.0), ("my_kernel", 10.0), ("sm90_xmma_fprop", 0.0)])
    assert abs(s["share"] - 0.9) < 1e-9 and s["top"][0]["library"]
    assert library_share([])["share"] == 0.0
    c = cpu_op_share([("aten::add", 80.0), ("aten::empty_like", 15.0)], wall_us=100.0)
    assert abs(c["share"] - 0.8) < 1e-9


def test_alias_detection():
    a, b = torch.rand(10), torch.rand(10)
    assert aliased_input(a[2:5], [b, a]) == 1
    assert aliased_input(a.clone(), [a, b]) is None
    assert aliased_input("not a tensor", [a]) is None


def test_digest_sees_any_change():
    a = torch.rand(4, 5)
    d = tensor_digest(a)
    assert d == tensor_digest(a.clone())
    a[1, 2] += 1e-7 if a[1, 2] < 0.5 else -1e-7
    assert d != tensor_digest(a)
    assert tensor_digest(torch.zeros(2, 3)) != tensor_digest(torch.zeros(3, 2))


def test_digest_hashes_dtype_shape_and_the_bytes_in_memory_order():
    import hashlib
    for t in (torch.arange(12, dtype=torch.float32).reshape(3, 4).t(), torch.tensor([True, False]),
              torch.rand(5).to(torch.bfloat16), torch.empty(0, 3)):
        expected = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
        expected.update(bytes(t.contiguous().view(torch.uint8).reshape(-1).tolist()))
        assert tensor_digest(t) == expected.hexdigest()


def test_poison_is_a_no_op_on_cpu():
    assert poison_free_memory("cpu", 1 << 20) == 0


def test_seeds_mix_the_secret_but_keep_the_init_seed():
    one = make_seeds(0, 11, [{"batch_size": 1}], trials=3, extra_trials=2)
    two = make_seeds(0, 12, [{"batch_size": 1}], trials=3, extra_trials=2)
    assert one["init"] == two["init"]                       # matched construction is reproducible
    assert one["shapes"][0]["trials"] != two["shapes"][0]["trials"]  # inputs depend on the secret
    assert one == make_seeds(0, 11, [{"batch_size": 1}], trials=3, extra_trials=2)  # replayable
    assert [len(s["trials"]) for s in one["shapes"]] == [3, 2] and one["shapes"][1]["overrides"] == {"batch_size": 1}
    assert len(set(one["shapes"][0]["trials"] + one["shapes"][1]["trials"] + one["timing"])) == 7
