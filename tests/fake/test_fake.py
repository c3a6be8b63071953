import pytest
import sympy
import torch

from kiln.fake import (
    FakeTensor,
    FakeTensorMode,
    ShapeEnv,
    UnsupportedFakeOp,
    fake_from_real,
    sym_numel,
    sym_sizes,
    sym_strides,
    to_expr,
)


def test_metadata_matches_real():
    x = torch.randn(4, 6, dtype=torch.float64).t()[1:]
    f = fake_from_real(x)
    assert isinstance(f, FakeTensor)
    assert (f.shape, f.stride(), f.storage_offset(), f.dtype, f.device) == (
        x.shape, x.stride(), x.storage_offset(), x.dtype, x.device)
    assert not f.requires_grad
    assert "FakeTensor(size=(5, 4)" in repr(f)


def test_ops_compute_metadata_through_meta_kernels():
    mode = FakeTensorMode()
    a, b = mode.from_real(torch.randn(3, 4)), mode.from_real(torch.randn(4, 5))
    c = torch.relu(a @ b).sum(dim=0, keepdim=True)
    assert isinstance(c, FakeTensor) and c.shape == (1, 5) and c.device.type == "cpu"
    h = a.to(torch.float16)
    assert h.dtype == torch.float16


def test_views_alias_and_inplace_metadata_ops():
    mode = FakeTensorMode()
    x = torch.randn(3, 4)
    f = mode.from_real(x)
    v = mode.from_real(x[1:])  # shares x's storage, as the real tensors do
    assert v.untyped_storage()._cdata == f.untyped_storage()._cdata
    assert v.storage_offset() == 4
    g = f.t()
    assert g.untyped_storage()._cdata == f.untyped_storage()._cdata
    f.t_()
    assert f.shape == (4, 3) and f.stride() == (1, 4)
    f.unsqueeze_(0)
    assert f.shape == (1, 4, 3)
    other = mode.from_real(torch.randn(3, 4))
    assert other.untyped_storage()._cdata != g.untyped_storage()._cdata
    assert mode.from_real(x) is mode.from_real(x)


def test_requires_grad_and_autograd_on_fakes():
    mode = FakeTensorMode()
    w = mode.from_real(torch.nn.Parameter(torch.randn(3, 3)))
    x = mode.from_real(torch.randn(2, 3))
    assert w.requires_grad and w.is_leaf
    y = x @ w
    assert y.requires_grad and y.grad_fn is not None
    y.sum().backward()
    assert isinstance(w.grad, FakeTensor) and w.grad.shape == (3, 3)


def test_factory_ops_in_mode():
    with FakeTensorMode():
        z = torch.zeros(2, 3, dtype=torch.int32)
        a = torch.arange(5)
        r = torch.randn(4)
        e = torch.empty_strided((2, 2), (1, 2))
        t = torch.tensor([1.0, 2.0])
    for x in (z, a, r, e, t):
        assert isinstance(x, FakeTensor)
    assert z.dtype == torch.int32 and a.shape == (5,) and e.stride() == (1, 2) and t.shape == (2,)


def test_device_rules():
    cuda = FakeTensor(torch.empty(3, device="meta"), "cuda")
    assert cuda.device == torch.device("cuda", 0) and cuda.is_cuda
    cpu = fake_from_real(torch.randn(3))
    with pytest.raises(RuntimeError, match="same device"):
        cuda + cpu
    # a 0-dim CPU tensor mixes with any device, as in eager
    out = cuda * fake_from_real(torch.tensor(2.0))
    assert out.device.type == "cuda"
    assert (cuda + 1).sum().device.type == "cuda"
    assert torch.ops.aten._to_copy.default(cpu, device=torch.device("cuda")).device.type == "cuda"


def test_ctc_loss_takes_cpu_lengths_with_cuda_inputs():
    # as in eager: the lengths may stay on the CPU. The op then has no meta kernel, which makes a
    # clear UnsupportedFakeOp (kiln runs that region eagerly), not a device-mismatch error
    log_probs = FakeTensor(torch.empty(10, 2, 5, device="meta"), "cuda")
    targets = FakeTensor(torch.empty(2, 4, dtype=torch.long, device="meta"), "cuda")
    # the lengths as tensors or as lists (other overloads)
    for lengths in ((torch.tensor([10, 8]), torch.tensor([4, 3])), ([10, 8], [4, 3])):
        with FakeTensorMode(), pytest.raises(UnsupportedFakeOp, match="ctc_loss"):
            torch.nn.functional.ctc_loss(log_probs, targets, *lengths)
    with FakeTensorMode(), pytest.raises(UnsupportedFakeOp, match="ctc_loss"):
        torch.ops.aten._use_miopen_ctc_loss.Tensor(log_probs, targets, torch.tensor([10, 8]),
                                                   torch.tensor([4, 3]), 0)


def test_data_dependent_ops_raise_clear_error():
    f = fake_from_real(torch.randn(4))
    with pytest.raises(UnsupportedFakeOp, match="depends on tensor data"):
        torch.nonzero(f)
    with pytest.raises(UnsupportedFakeOp):
        f.sum().item()
    with pytest.raises(UnsupportedFakeOp, match="boolean mask"):
        f[f > 0]


def test_sympy_sizes():
    f = fake_from_real(torch.randn(2, 3, 5))
    sizes = sym_sizes(f)
    assert all(isinstance(s, sympy.Integer) for s in sizes) and sizes == (2, 3, 5)
    assert sym_strides(f) == (15, 5, 1)
    assert sym_numel(f) == 30
    env = ShapeEnv()
    s0 = env.create_symbol(8)
    s1 = env.create_symbol(3)
    assert env.size_hint(s0 * s1 + 1) == 25
    assert to_expr(4) == sympy.Integer(4)
    assert (s0 > 0) is sympy.true  # symbols are positive integers
    with pytest.raises(ValueError):
        env.size_hint(sympy.Symbol("unknown"))


@pytest.mark.parametrize("src_kind", ["contiguous", "transposed", "empty"])
def test_fallback_meta_of_transformer_encoder_layer_matches_torch(src_kind):
    """kiln's own rule for _transformer_encoder_layer_fwd (torch 2.11 has no meta kernel for it) gives
    the metadata that newer torch's meta kernel gives."""
    from kiln.fake.tensor import FALLBACK_META, _kernel_context

    op = torch.ops.aten._transformer_encoder_layer_fwd.default
    src = {"contiguous": torch.empty(2, 8, 32, device="meta"),
           "transposed": torch.empty(8, 2, 32, device="meta").transpose(0, 1),
           "empty": torch.empty(2, 0, 32, device="meta")}[src_kind]
    w = lambda *shape: torch.empty(*shape, device="meta")  # noqa: E731
    args = (src, 32, 4, w(96, 32), w(96), w(32, 32), w(32), False, False, 1e-5, w(32), w(32), w(32), w(32),
            w(64, 32), w(64), w(32, 64), w(32))
    with _kernel_context():
        got = FALLBACK_META[op](*args)
    try:
        want = op(*args)
    except NotImplementedError:
        pytest.skip("this torch has no meta kernel to compare with")
    assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)


def test_convolution_output_layout_is_the_real_kernels():
    # the meta kernel says contiguous; oneDNN (CPU) and cuDNN return channels-last for channels-last
    # inputs or weights, and compiled code must see the strides eager returns
    from kiln.fake import FakeTensorMode

    cl = torch.channels_last
    x, w = torch.randn(2, 3, 12, 12), torch.randn(8, 3, 3, 3)
    cases = [(x, w), (x.contiguous(memory_format=cl), w), (x, w.contiguous(memory_format=cl)),
             (x.contiguous(memory_format=cl), w.contiguous(memory_format=cl))]
    for xr, wr in cases:
        mode = FakeTensorMode()
        want = torch.convolution(xr, wr, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        got = torch.ops.aten.convolution.default(mode.from_real(xr), mode.from_real(wr), None, [1, 1], [1, 1],
                                                 [1, 1], False, [0, 0], 1)
        assert got.shape == want.shape and got.stride() == want.stride(), (xr.stride(), wr.stride())
