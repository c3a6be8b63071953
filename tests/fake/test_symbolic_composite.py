"""kiln's Python bodies of matmul and linear (fake/symbolic_composite.py): the same values, shapes and
strides as ATen's C++ bodies, on real tensors and on fakes with symbolic sizes."""
import pytest
import torch
import torch.nn.functional as F

from kiln.fake import FakeTensorMode
from kiln.fake.symbolic import ShapeEnv, symbolic_fake
from kiln.fake.shapes import to_expr
from kiln.fake.symbolic_composite import SymbolicCompositeMode, linear, matmul

SHAPES = [
    ((3,), (3,)), ((4, 3), (3,)), ((3,), (3, 5)), ((4, 3), (3, 5)),
    ((2, 4, 3), (3,)), ((2, 4, 3), (3, 5)), ((3,), (2, 3, 5)), ((4, 3), (2, 3, 5)),
    ((2, 4, 3), (2, 3, 5)), ((2, 1, 4, 3), (3, 3, 5)), ((1, 4, 3), (6, 3, 5)), ((2, 2, 4, 3), (3,)),
    ((0, 4, 3), (3, 5)), ((2, 4, 0), (0, 5)),
]


@pytest.mark.parametrize("a,b", SHAPES)
@pytest.mark.parametrize("grad", [False, True])
def test_matmul_matches_aten_on_real_tensors(a, b, grad):
    torch.manual_seed(0)
    x, y = torch.randn(a), torch.randn(b, requires_grad=grad)
    expected, got = torch.matmul(x, y), matmul(x, y)
    assert got.shape == expected.shape and got.stride() == expected.stride()
    torch.testing.assert_close(got, expected)


def test_matmul_of_a_transposed_batch_folds_like_aten():
    x = torch.randn(4, 2, 3).transpose(0, 1)  # (2, 4, 3), batch dims not foldable without a copy
    y = torch.randn(3, 5)
    assert matmul(x, y).stride() == torch.matmul(x, y).stride()
    torch.testing.assert_close(matmul(x, y), torch.matmul(x, y))


@pytest.mark.parametrize("shape", [(4, 3), (2, 4, 3), (2, 2, 4, 3)])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
def test_linear_matches_aten(shape, bias, transposed):
    torch.manual_seed(0)
    x = torch.randn(shape)
    if transposed:
        x = x.transpose(0, -2)
    w, b = torch.randn(5, 3), (torch.randn(5) if bias else None)
    expected, got = F.linear(x, w, b), linear(x, w, b)
    assert got.shape == expected.shape and got.stride() == expected.stride()
    torch.testing.assert_close(got, expected)


def test_matmul_and_linear_on_symbolic_fakes():
    env = ShapeEnv()
    mode = FakeTensorMode()
    x = symbolic_fake(torch.randn(2, 16, 8), env, "L['x']", {1})
    w = mode.from_real(torch.randn(6, 8))
    with mode, SymbolicCompositeMode():
        assert str(tuple((x @ w.t()).shape)) == "(2, s0, 6)"
        assert str(tuple(torch.matmul(x, torch.ones(1, 8, 3)).shape)) == "(2, s0, 3)"
        assert str(tuple(F.linear(x, w).shape)) == "(2, s0, 6)"
        assert str(tuple(x.matmul(x.transpose(1, 2)).shape)) == "(2, s0, s0)"
    assert env.failed is None


def test_mean_over_symbolic_dims_of_a_channels_last_tensor():
    env = ShapeEnv()
    x = symbolic_fake(torch.randn(4, 8, 6, 6), env, "L['x']", {0, 2, 3})
    with FakeTensorMode():
        y = x.contiguous(memory_format=torch.channels_last)
        pooled = y.mean((2, 3), keepdim=True)
        assert str(tuple(pooled.shape)) == "(s0, 8, 1, 1)" and pooled.stride()[:2] == (8, 1)
        assert str(tuple(y.mean(1).shape)) == "(s0, s1, s1)"
    assert env.failed is None


@pytest.mark.parametrize("seen", [77, 64])
def test_efficient_attention_bias_is_padded_without_guards(seen):
    """The mask the memory-efficient kernel gets: 16-aligned rows whatever the length, no size guard."""
    from kiln.fake.symbolic_composite import efficient_bias

    env = ShapeEnv()
    mode = FakeTensorMode()
    mask = symbolic_fake(torch.ones(2, 1, 1, seen, dtype=torch.bool), env, "L['m']", {3})
    q = symbolic_fake(torch.randn(2, 4, seen, 32), env, "L['q']", {2})
    with mode:
        bias = efficient_bias(mask, q, q)
    assert str(tuple(bias.shape)) == "(2, 4, s0, s0)" and bias.dtype == torch.float32
    row = bias.stride()[0]
    for n in (5, 16, 77, 512):  # the row stride is a multiple of 16 at every length
        expr = to_expr(row)
        assert int(expr.subs({s: n for s in expr.free_symbols})) % 16 == 0
    assert env.guards == [] and env.failed is None


def test_sdpa_rule_keeps_out_of_cpu_calls():
    from kiln.fake.symbolic_composite import scaled_dot_product_attention

    q = torch.randn(1, 2, 5, 8)
    assert scaled_dot_product_attention(q, q, q) is NotImplemented


@pytest.mark.parametrize("args", [(2,), (3, 2, 1), (3, 2, 1, 2, True), (4, None, 0, 1, True)])
@pytest.mark.parametrize("shape", [(2, 3, 11), (3, 10)])
def test_max_pool1d_body_equals_aten(args, shape):
    from kiln.fake.symbolic_composite import _functional_max_pool1d_args, max_pool1d

    x = torch.randn(*shape)
    x.view(-1)[4] = float("nan")
    bound = _functional_max_pool1d_args((x, *args), {})
    torch.testing.assert_close(max_pool1d(*bound), torch.nn.functional.max_pool1d(x, *args), equal_nan=True)
    assert _functional_max_pool1d_args((x, 2), {"return_indices": True}) is None


@pytest.mark.parametrize("bias", [False, True])
def test_gru_cell_body_equals_aten_and_runs_on_symbolic_fakes(bias):
    # torch.gru_cell (nn.GRUCell) reads plain sizes in C++ (its checks, unsafe_chunk): kiln's body
    from kiln.fake.symbolic_composite import gru_cell

    torch.manual_seed(0)
    cell = torch.nn.GRUCell(4, 6, bias=bias)
    x, h = torch.randn(5, 4), torch.randn(5, 6)
    args = (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    torch.testing.assert_close(gru_cell(x, h, *args), torch.gru_cell(x, h, *args))
    with pytest.raises(RuntimeError, match="inconsistent input_size"):
        gru_cell(torch.randn(5, 3), h, *args)
    with pytest.raises(RuntimeError, match="doesn't match hidden"):
        gru_cell(x, torch.randn(4, 6), *args)
    env = ShapeEnv()
    mode = FakeTensorMode()
    xs = symbolic_fake(x, env, "L['x']", {0})
    hs = symbolic_fake(h, env, "L['h']", {0})
    fargs = [mode.from_real(a) if a is not None else None for a in args]
    with mode, SymbolicCompositeMode():
        assert str(tuple(torch.gru_cell(xs, hs, *fargs).shape)) == "(s0, 6)"
    assert env.failed is None


def test_getitem_and_setitem_at_a_symbolic_int_index_keep_it_symbolic():
    # torch's C++ __getitem__/__setitem__ read a SymInt index through __index__ (a plain int: every size
    # compiled again); kiln's rules take select/slice steps instead
    from kiln.fake.symbolic_composite import tensor_getitem

    x = torch.arange(12.0).view(4, 3)
    assert tensor_getitem(x, 1) is NotImplemented and tensor_getitem(x, (slice(None), 1)) is NotImplemented
    env = ShapeEnv()
    mode = FakeTensorMode()
    xs = symbolic_fake(torch.randn(8, 16, 4), env, "L['x']", {0})
    n = xs.shape[0]
    with mode, SymbolicCompositeMode():
        assert str(tuple(xs[n - 2].shape)) == "(16, 4)"
        assert str(tuple(xs[..., None, n - 3, 1:].shape)) == "(s0, 1, 3)"
        assert str(tuple(xs[:, n // 2].shape)) == "(s0, 4)"
        cache = torch.zeros(2, 16, 4)
        cache[:, n] = torch.ones(2, 4)
        cache[0, n - 1] = 0.5
    # bounds (the index within its dim, n - 3 not negative), no size pinned to its value
    facts = [str(g.fact) for g in env.guards]
    assert "s0 - 3 >= 0" in facts and not any("Eq" in f for f in facts), facts
    assert env.failed is None


def _cuda_kernels(fn, *args) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("grad", [False, True])
def test_dynamic_sdpa_runs_a_fused_kernel(causal, grad):
    # ATen's backend choice asked of symbolic fakes says "math" (two float32 GEMMs and a softmax); the
    # dynamic graph must run a fused kernel: in inference the one eager runs (kiln::attention, chosen per
    # call), with gradients flash (chosen for every size: its backward needs flash's saved outputs)
    import kiln

    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    kiln.reset()
    compiled = kiln.compile(f, dynamic=True)
    for t in (48, 100, 257):
        q, k, v = (torch.randn(2, 4, t, 64, device="cuda", dtype=torch.bfloat16, requires_grad=grad) for _ in range(3))
        names = " ".join(_cuda_kernels(compiled, q, k, v)).lower()
        torch.testing.assert_close(compiled(q, k, v), f(q, k, v), atol=2e-2, rtol=2e-2)
        assert "gemm" not in names.replace("wgmma", ""), names[:2000]
        if grad:
            assert "flash" in names, names[:2000]
        else:
            eager = [n for n in _cuda_kernels(f, q, k, v) if "sdpa" in n.lower() or "flash" in n.lower() or "fmha" in n.lower()]
            assert eager and all(n.lower() in names for n in eager), (eager, names[:2000])
    assert kiln.stats.dynamic_graphs >= 1


def _aten_text(debug_dir) -> str:
    import glob

    return "\n".join(open(p).read() for p in sorted(glob.glob(f"{debug_dir}/*_aten.txt")))


@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask", "gqa"])
def test_dynamic_inference_sdpa_is_one_node_whose_kernel_aten_chooses_per_call(monkeypatch, tmp_path, case):
    # on CUDA, a dynamic inference graph keeps attention whole (kiln::attention), so ATen picks the fused
    # kernel (cuDNN, flash, ...) at each call's sizes, as eager does; the CPU stands in for CUDA here
    import kiln
    import kiln.fake.symbolic_composite as composite

    monkeypatch.setattr(composite, "PER_CALL_ATTENTION_DEVICES", {"cpu"})
    heads_kv = 2 if case == "gqa" else 4

    def f(q, k, v, mask):
        kw = {"is_causal": True} if case == "causal" else {"enable_gqa": True} if case == "gqa" else {}
        if mask is not None:
            kw["attn_mask"] = mask
        return F.scaled_dot_product_attention(q * 1.5, k, v, **kw).transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)

    compiled = kiln.compile(f, dynamic=True, options={"debug_dir": str(tmp_path)})
    for t in (8, 13, 40):
        torch.manual_seed(t)
        q = torch.randn(2, 4, t, 16)
        k, v = (torch.randn(2, heads_kv, t, 16) for _ in range(2))
        mask = None
        if case == "bool_mask":
            mask = torch.rand(t, t) > 0.3
            mask[:, 0] = True
        elif case == "float_mask":
            mask = torch.randn(2, 1, t, t)
        with torch.no_grad():
            got = compiled(q, k, v, mask)
        torch.testing.assert_close(got, f(q, k, v, mask))
    text = _aten_text(tmp_path)
    assert "kiln.attention" in text and "bmm" not in text, text


def test_dynamic_sdpa_with_gradients_keeps_a_kernel_chosen_for_every_size(monkeypatch, tmp_path):
    # training needs the chosen kernel's saved outputs for its backward: not kiln::attention
    import kiln
    import kiln.fake.symbolic_composite as composite

    monkeypatch.setattr(composite, "PER_CALL_ATTENTION_DEVICES", {"cpu"})

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum()

    compiled = kiln.compile(f, dynamic=True, options={"debug_dir": str(tmp_path)})
    for t in (8, 13, 40):
        q, k, v = (torch.randn(2, 4, t, 16, requires_grad=True) for _ in range(3))
        compiled(q, k, v).backward()
        grads = [x.grad for x in (q, k, v)]
        q2, k2, v2 = (x.detach().requires_grad_() for x in (q, k, v))
        f(q2, k2, v2).backward()
        for g, x in zip(grads, (q2, k2, v2)):
            torch.testing.assert_close(g, x.grad)
    assert "kiln.attention" not in _aten_text(tmp_path)


def test_kiln_attention_is_found_by_name_as_the_warm_cache_loads_ops():
    from kiln.aot.attention_op import attention
    from kiln.backends.warm_cache import load_op

    assert load_op("kiln", "attention", "default") is attention
    q = torch.randn(1, 2, 5, 8)
    torch.testing.assert_close(attention(q, q, q, None, True), F.scaled_dot_product_attention(q, q, q, is_causal=True))
