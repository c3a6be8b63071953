"""Misaligned 16-bit products are computed on zero-padded operands (``kiln/lower/gemm_padding.py``)."""
import pytest
import torch
import torch.nn.functional as F

from kiln.aot import AtenRuntime
from kiln.backends.kiln import compile_graph
from kiln.fake.mode import fake_like
from kiln.loopir.nodes import ExternKernel
from kiln.lower.gemm_padding import padding_for, worth_padding
from kiln.lower.graph import lower_graph
from kiln.options import default_options
from tests.lower.helpers import assert_same, trace

aten = torch.ops.aten


def _cuda_fake(shape, dtype=torch.bfloat16, stride=None):
    t = torch.empty(shape, dtype=dtype, device="meta")
    if stride is not None:
        t = t.as_strided(shape, stride)
    return fake_like(t, device="cuda")


def test_padding_for_each_misaligned_dimension():
    assert padding_for(_cuda_fake((64, 64)), _cuda_fake((64, 64))) is None
    assert padding_for(_cuda_fake((64, 64)), _cuda_fake((64, 50257))) == (0, 0, 7)
    assert padding_for(_cuda_fake((64, 50257)), _cuda_fake((50257, 64))) == (0, 7, 0)
    column_major = _cuda_fake((50257, 64), stride=(1, 50257))  # grad.T in a weight gradient
    assert padding_for(column_major, _cuda_fake((64, 64))) == (7, 0, 0)
    assert padding_for(_cuda_fake((3, 64, 36), torch.float32), _cuda_fake((3, 36, 36), torch.float32)) is None
    assert padding_for(_cuda_fake((3, 64, 30), torch.float32), _cuda_fake((3, 30, 30), torch.float32)) == (0, 2, 2)


def test_worth_padding_a_big_lm_head_not_a_small_product():
    h, w_t = _cuda_fake((4096, 768)), _cuda_fake((768, 50257), stride=(1, 768))
    assert worth_padding(h, w_t, padding_for(h, w_t))
    small_a, small_b = _cuda_fake((16, 64)), _cuda_fake((64, 100))
    assert not worth_padding(small_a, small_b, padding_for(small_a, small_b))


def _compiled(fn, args, gemm_padding):
    ag = trace(fn, args)
    cg = compile_graph(ag.gm, default_options().replace(gemm_padding=gemm_padding))
    return AtenRuntime(ag, run=cg.wrapper.compile()), cg


def _extern_ops(cg):
    return [n.op for n in cg.lowered.nodes if isinstance(n, ExternKernel)] if hasattr(cg, "lowered") else None


@pytest.mark.parametrize("case", ["lm_head", "k_misaligned", "column_major_a", "bmm", "consumer_fused"])
def test_padded_products_equal_eager(case):
    """Forced on (mode "always") on CPU float32: the padded computation gives eager's values, shapes and
    strides, whatever reads the result."""
    g = torch.Generator().manual_seed(0)
    if case == "lm_head":
        args = [torch.randn(6, 16, generator=g), torch.randn(37, 16, generator=g)]
        fn = lambda h, w: F.linear(h, w)  # noqa: E731
    elif case == "k_misaligned":
        args = [torch.randn(8, 13, generator=g), torch.randn(13, 16, generator=g)]
        fn = torch.mm
    elif case == "column_major_a":
        args = [torch.randn(12, 21, generator=g), torch.randn(12, 8, generator=g)]
        fn = lambda gr, h: gr.t() @ h  # noqa: E731  (a weight gradient's shape)
    elif case == "bmm":
        args = [torch.randn(3, 5, 7, generator=g), torch.randn(3, 7, 9, generator=g)]
        fn = torch.bmm
    else:
        args = [torch.randn(6, 16, generator=g), torch.randn(37, 16, generator=g)]
        fn = lambda h, w: F.linear(h, w).softmax(-1).view(2, 3, 37)  # noqa: E731
    expected = fn(*args)
    padded, cg = _compiled(fn, args, "always")
    got = padded(*args)
    assert_same(got, expected, f"{case} with padding")
    assert got.stride() == expected.stride()
    assert "constant_pad_nd" in cg.wrapper.source or "pad" in cg.explain().lower()


def test_off_and_auto_leave_cpu_products_alone():
    args = [torch.randn(6, 16), torch.randn(37, 16)]
    for mode in ("off", "auto"):
        _, cg = _compiled(lambda h, w: F.linear(h, w), args, mode)
        assert "pad" not in cg.explain().lower()


def test_gemm_padding_option_is_checked():
    with pytest.raises(ValueError, match="gemm_padding"):
        default_options().replace(gemm_padding="sometimes")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_lm_head_on_cuda_bf16_is_padded_and_equals_eager():
    import kiln

    w = torch.randn(50257, 768, device="cuda", dtype=torch.bfloat16)
    h = torch.randn(2, 256, 768, device="cuda", dtype=torch.bfloat16)

    def fn(h):
        return F.linear(h, w)

    kiln.reset()
    got = kiln.compile(fn)(h)
    expected = fn(h)
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got, expected, atol=0.05, rtol=0.02)
    assert "constant_pad_nd" in str(kiln.explain(fn)(h))


@pytest.mark.parametrize("mode", ["auto", "always"])
def test_symbolic_sizes_are_not_padded_and_not_guarded(mode):
    # asking whether s0 is a multiple of 4 guarded on it: a dynamic MLP recompiled per remainder
    import torch.fx as fx

    from kiln.fake.symbolic import ShapeEnv, symbolic_fake
    from kiln.lower.gemm_padding import pad_misaligned_matmuls

    env = ShapeEnv()
    a = symbolic_fake(torch.randn(6, 5), env, "L['a']", {1})
    b = symbolic_fake(torch.randn(5, 7), env, "L['b']", {0})  # K = s0 (a weight gradient's product)
    g = fx.Graph()
    a_node, b_node = g.placeholder("a"), g.placeholder("b")
    a_node.meta["val"], b_node.meta["val"] = a, b
    mm = g.call_function(aten.mm.default, (a_node, b_node))
    mm.meta["val"] = torch.ops.aten.mm.default(a, b)
    g.output(mm)
    assert pad_misaligned_matmuls(g, mode) == 0
    assert env.guards == []


def test_a_gradient_and_its_transpose_share_one_straight_pad():
    """An LM head's backward pads its gradient for ``grad @ w`` (K misaligned) and ``grad.T @ h`` (a
    column-major M misaligned): one row-major pad of ``grad`` serves both (the second product reads it
    transposed), instead of a second, transposed copy."""
    from kiln.lower.gemm_padding import pad_misaligned_matmuls

    g = torch.Generator().manual_seed(0)
    args = [torch.randn(12, 21, generator=g), torch.randn(12, 8, generator=g), torch.randn(21, 8, generator=g)]

    def fn(grad, h, w):
        return grad.t() @ h, grad @ w

    ag = trace(fn, args)
    assert pad_misaligned_matmuls(ag.gm.graph, "always") == 2
    pads = [n for n in ag.gm.graph.nodes if n.target is aten.constant_pad_nd.default]
    grad_pads = [n for n in pads if n.args[0].op == "placeholder" and n.args[0].meta["val"].shape == (12, 21)]
    assert len(grad_pads) == 1 and grad_pads[0].args[1] == [0, 3, 0, 0], [n.format_node() for n in pads]
    assert len(pads) == 2, [n.format_node() for n in pads]  # grad's and w's: no transposed copy of grad
    expected = fn(*args)
    got, _ = _compiled(fn, args, "always")
    for a, b in zip(got(*args), expected):
        assert_same(a, b, "gradient products")
        assert a.stride() == b.stride()
