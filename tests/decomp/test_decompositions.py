"""Each decomposition against the op it replaces, on several dtypes.

Calls of decomposed ops are harvested from ordinary torch-level programs (the ATen calls eager makes
below autograd), then each harvested call is run twice on copies of its arguments: once as the op
itself, once as its decomposition (eagerly, on real tensors). Outputs and mutated arguments must agree.
"""
import collections

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from kiln.decomp import CORE_OPS, decomposition_table

aten = torch.ops.aten
TABLE = decomposition_table()
FLOATS = [torch.float32, torch.float64, torch.bfloat16]


def _copy(x):
    return x.detach().clone() if isinstance(x, torch.Tensor) else x


class Harvest(TorchDispatchMode):
    def __init__(self, sink):
        super().__init__()
        self.sink = sink

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        saved = (func, tree_map(_copy, args), tree_map(_copy, kwargs)) if func in TABLE else None
        out = func(*args, **kwargs)
        if saved is not None:
            self.sink.append(saved)
        return out


_SINK = []


def direct(op, *args, **kwargs):
    """Call a CompositeImplicitAutograd op (which decomposes before any dispatch mode sees it) and
    record the call, so its kiln decomposition is tested too."""
    out = op(*args, **kwargs)
    _SINK.append((op, tree_map(_copy, args), tree_map(_copy, kwargs)))
    return out


def r(*shape, dtype=torch.float32, low=-2.0, high=2.0):
    return (torch.rand(*shape, dtype=torch.float64) * (high - low) + low).to(dtype)


def workloads(dt):
    """Torch-level programs that reach the decomposed ATen ops; dt is the floating dtype."""
    x4 = r(2, 3, 5, 6, dtype=dt)
    x3 = r(2, 4, 6, dtype=dt)
    x2 = r(4, 6, dtype=dt)
    idx = torch.tensor([[0, 2, 1], [3, 3, 0]])
    target = torch.tensor([1, 0, 3, 5])
    w6 = r(6, dtype=dt)
    yield lambda: F.layer_norm(x3, (6,), w6, r(6, dtype=dt))
    yield lambda: F.layer_norm(x3, (4, 6))
    yield lambda: F.group_norm(x4, 3, r(3, dtype=dt), r(3, dtype=dt))
    for training in (True, False):
        yield lambda: F.batch_norm(x4, torch.zeros(3, dtype=dt), torch.ones(3, dtype=dt), r(3, dtype=dt), r(3, dtype=dt), training=training, momentum=0.2)
    yield lambda: F.batch_norm(x4, None, None, training=True)
    yield lambda: torch.ops.aten._native_batch_norm_legit_functional(x4, None, None, torch.zeros(3, dtype=dt), torch.ones(3, dtype=dt), True, 0.1, 1e-5)
    yield lambda: torch.ops.aten.native_batch_norm(x4, None, None, torch.zeros(3, dtype=dt), torch.ones(3, dtype=dt), True, 0.1, 1e-5)
    yield lambda: torch.ops.aten._native_batch_norm_legit(x4, None, None, torch.zeros(3, dtype=dt), torch.ones(3, dtype=dt), False, 0.1, 1e-5)
    yield lambda: torch.ops.aten._batch_norm_no_update(x4, None, None, torch.zeros(3, dtype=dt), torch.ones(3, dtype=dt), 0.1, 1e-5)
    yield lambda: torch.ops.aten._batch_norm_with_update(x4, r(3, dtype=dt), None, torch.zeros(3, dtype=dt), torch.ones(3, dtype=dt), 0.1, 1e-5)
    yield lambda: torch.ops.aten._native_batch_norm_legit.no_stats(x4, None, r(3, dtype=dt), True, 0.1, 1e-5)
    yield lambda: torch.ops.aten._native_batch_norm_legit_no_training(x4, None, None, r(3, dtype=dt), r(3, dtype=dt, low=0.5), 0.1, 1e-5)
    for f in (F.gelu, F.silu, F.mish, F.hardswish, F.hardsigmoid, F.elu, F.leaky_relu, F.softplus, F.relu,
              F.relu6, F.hardtanh, F.softshrink, F.hardshrink, F.logsigmoid, F.selu, F.celu, torch.sigmoid):
        yield lambda f=f: f(x3)
    yield lambda: F.gelu(x3, approximate="tanh")
    yield lambda: F.softplus(x3, beta=2, threshold=1)
    yield lambda: F.threshold(x3, 0.5, -1.0)
    yield lambda: F.glu(x3, -1)
    yield lambda: F.prelu(x4, r(3, dtype=dt))
    yield lambda: torch.logit(r(3, 4, dtype=dt, low=0.05, high=0.95), eps=1e-3)
    yield lambda: F.softmax(x3, -1)
    yield lambda: F.log_softmax(x3, 1)
    yield lambda: torch.clamp(x3, -0.5, 0.7)
    yield lambda: torch.clamp(x3, min=r(6, dtype=dt))
    yield lambda: torch.clamp_min(x3, 0.1)
    yield lambda: torch.clamp_max(x3, 0.1)
    yield lambda: torch.clamp_min(x3, r(6, dtype=dt))
    yield lambda: torch.clamp_max(x3, r(6, dtype=dt))
    yield lambda: torch.rsub(x3, x3.flip(0), alpha=2)
    yield lambda: torch.ops.aten.square(x3)
    yield lambda: torch.ops.aten.fill(x3, 1.5)
    yield lambda: torch.ops.aten.fill(x3, torch.tensor(1.5, dtype=dt))
    yield lambda: torch.ops.aten.zero(x3)
    yield lambda: torch.ops.aten.count_nonzero(torch.relu(x3), [0, 2])
    yield lambda: torch.ops.aten.count_nonzero(torch.relu(x3))
    yield lambda: torch.ops.aten.expand_as(w6, x2)
    yield lambda: torch.ops.aten.l1_loss(x3, x3.flip(0))
    yield lambda: torch.ops.aten.empty_like(x3)
    yield lambda: torch.ops.aten.new_empty(x3, [2, 5])
    yield lambda: x3.index_fill(2, torch.tensor([1, 4]), torch.tensor(-2.0, dtype=dt))
    yield lambda: torch.ops.aten.celu(x3, 0.7)
    yield lambda: torch.ops.aten._safe_softmax(torch.where(x3 > 1, float("-inf"), x3), -1)
    yield lambda: torch.add(x3, x3, alpha=2)
    yield lambda: torch.sub(x3, x3.flip(0), alpha=3)
    yield lambda: torch.rsub(x3, 2.0)
    yield lambda: torch.addcmul(x3, x3, x3, value=0.5)
    yield lambda: torch.addcdiv(x3, x3, r(2, 4, 6, dtype=dt, low=1, high=2), value=2)
    yield lambda: torch.lerp(x3, x3 * 2, 0.3)
    yield lambda: torch.lerp(x3, x3 * 2, r(6, dtype=dt, low=0, high=1))
    yield lambda: x3.masked_fill(x3 > 0, -1.0)
    yield lambda: x3.masked_fill(x3 > 0, torch.tensor(3.0, dtype=dt))
    yield lambda: x3.clone().fill_(2.0)
    yield lambda: x3.clone().fill_(torch.tensor(2.0, dtype=dt))
    yield lambda: x3.clone().zero_()
    yield lambda: x3.clone().copy_(x2)
    yield lambda: torch.ops.aten.copy(x3, x2)
    yield lambda: torch.square(x3)
    yield lambda: torch.frac(x3)
    yield lambda: torch.deg2rad(x3)
    yield lambda: torch.rad2deg(x3)
    yield lambda: torch.floor_divide(x3, 0.3)
    yield lambda: torch.logaddexp(x3, x3.flip(0))
    yield lambda: torch.heaviside(x3, x3.flip(0))
    yield lambda: torch.ops.aten.lift_fresh_copy(x3)
    yield lambda: x3.mean()
    yield lambda: x3.mean(dim=(0, 2), keepdim=True)
    yield lambda: x3.var(dim=1)
    yield lambda: x3.std(dim=(0, 2), correction=0, keepdim=True)
    yield lambda: torch.var_mean(x3, dim=1)
    yield lambda: torch.std_mean(x3, dim=-1, keepdim=True)
    yield lambda: torch.logsumexp(x3, 1)
    for ord in (2, 1, 0, 3, float("inf"), float("-inf")):
        yield lambda ord=ord: torch.linalg.vector_norm(x3, ord, dim=-1)
    yield lambda: x3.max(dim=1)
    yield lambda: x3.min(dim=-1, keepdim=True)
    yield lambda: x3.max()
    yield lambda: x3.min()
    yield lambda: torch.aminmax(x3, dim=0)
    yield lambda: torch.nansum(torch.where(x3 > 1, float("nan"), x3))
    yield lambda: torch.count_nonzero(torch.relu(x3), dim=1)
    yield lambda: x3.sum()
    yield lambda: torch.addmm(r(5, dtype=dt), x2, r(6, 5, dtype=dt), beta=0.5, alpha=2)
    yield lambda: F.linear(x3, r(5, 6, dtype=dt), r(5, dtype=dt))
    yield lambda: torch.baddbmm(r(2, 4, 5, dtype=dt), x3, r(2, 6, 5, dtype=dt))
    yield lambda: torch.addbmm(r(4, 5, dtype=dt), x3, r(2, 6, 5, dtype=dt), beta=0)
    yield lambda: torch.mv(x2, w6)
    yield lambda: torch.addmv(r(4, dtype=dt), x2, w6)
    yield lambda: torch.dot(w6, w6)
    yield lambda: torch.addr(x2, r(4, dtype=dt), w6)
    yield lambda: torch.ops.aten._convolution(x4, r(2, 3, 3, 3, dtype=dt), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, False, False, True, True)
    yield lambda: x2.t()
    yield lambda: x3.transpose(0, 2)
    yield lambda: x3.split(2, dim=2)
    yield lambda: x3.split([1, 3], dim=1)
    yield lambda: x3.unbind(1)
    yield lambda: torch.ops.aten._reshape_alias(x2, [6, 4], [1, 6])
    yield lambda: w6.expand_as(x2)
    yield lambda: torch.stack([x2, x2], dim=1)
    yield lambda: x2.repeat(2, 1, 3)
    yield lambda: torch.roll(x3, (1, -2), (0, 2))
    yield lambda: torch.roll(x3, 3)
    yield lambda: torch.flip(x3, (0, 2))
    yield lambda: torch.tril(x2, 1)
    yield lambda: torch.triu(x3, -1)
    yield lambda: x3.new_zeros(2, 3)
    yield lambda: x3.new_ones(2, 3)
    yield lambda: x3.new_full((2, 3), 7.0)
    yield lambda: torch.zeros_like(x3)
    yield lambda: torch.ones_like(x3.transpose(0, 1))
    yield lambda: torch.full_like(x3, 2.5)
    yield lambda: torch.zeros(2, 3, dtype=dt)
    yield lambda: torch.ones(2, 3, dtype=dt)
    yield lambda: torch.arange(5, dtype=dt)
    yield lambda: torch.arange(2, 9)
    for mode in ("reflect", "replicate"):
        yield lambda mode=mode: F.pad(x3, (2, 1), mode=mode)
        yield lambda mode=mode: F.pad(x4, (2, 1, 1, 2), mode=mode)
        yield lambda mode=mode: F.pad(r(1, 2, 3, 4, 5, dtype=dt), (1, 1, 2, 0, 1, 2), mode=mode)
    yield lambda: torch.index_select(x3, 1, torch.tensor([3, 0, 0]))
    yield lambda: F.embedding(idx, x2.t().contiguous())
    yield lambda: x3.index_add(2, torch.tensor([0, 5, 0]), r(2, 4, 3, dtype=dt), alpha=2)
    yield lambda: x3.index_copy(1, torch.tensor([3, 0]), r(2, 2, 6, dtype=dt))
    yield lambda: x3.index_fill(2, torch.tensor([1, 4]), -2.0)
    yield lambda: torch.ops.aten._unsafe_index(x3, [None, torch.tensor([1, 1, 0])])
    yield lambda: torch.take(x3, idx)
    logits = r(4, 6, dtype=dt)
    yield lambda: F.cross_entropy(logits, target)
    yield lambda: F.cross_entropy(logits, target, weight=r(6, dtype=dt, low=0.1, high=1), ignore_index=3, reduction="sum")
    yield lambda: F.nll_loss(logits.log_softmax(-1), target, reduction="none")
    yield lambda: F.nll_loss(r(2, 6, 3, 3, dtype=dt), torch.randint(0, 6, (2, 3, 3)))
    yield lambda: F.mse_loss(x3, x3.flip(0))
    yield lambda: F.l1_loss(x3, x3.flip(0), reduction="sum")
    yield lambda: F.smooth_l1_loss(x3, x3.flip(0), beta=0.5)
    yield lambda: F.huber_loss(x3, x3.flip(0), delta=0.7)
    p = r(3, 4, dtype=dt, low=0.02, high=0.98)
    yield lambda: F.binary_cross_entropy(p, p.flip(0), weight=r(4, dtype=dt, low=0, high=1))
    yield lambda: F.binary_cross_entropy_with_logits(x2, p.new_ones(4, 6) * 0.3, pos_weight=r(6, dtype=dt, low=0.5, high=2))
    yield lambda: F.binary_cross_entropy_with_logits(x2, x2.sigmoid(), reduction="none")
    yield lambda: F.soft_margin_loss(x2, x2.sign())
    yield lambda: torch.ops.aten.native_dropout(x3, 0.3, True)
    yield lambda: torch.ops.aten.native_dropout(x3, 0.3, False)
    yield lambda: torch.rand_like(x3)
    yield lambda: torch.randn_like(x3)
    q, k, v = r(2, 2, 5, 8, dtype=dt), r(2, 2, 7, 8, dtype=dt), r(2, 2, 7, 8, dtype=dt)
    yield lambda: F.scaled_dot_product_attention(q, k, v)
    yield lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)
    yield lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=r(5, 7, dtype=dt))
    yield lambda: torch.ops.aten._scaled_dot_product_attention_math(q, k, v, torch.rand(5, 7) > 0.2, scale=0.3)
    yield lambda: direct(aten._scaled_dot_product_attention_math.default, q, k, v, is_causal=True)
    yield lambda: _fast_path(torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, activation="gelu"), dt, x3[..., :4].repeat(1, 1, 2))
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    padding = torch.tensor([[False, False, True, True], [False, True, False, False]])
    yield lambda: _fast_path(mha, dt, x3[..., :4].repeat(1, 1, 2), padding, need_weights=True)
    yield lambda: direct(aten.expand_as.default, w6, x2)
    yield lambda: direct(aten.l1_loss.default, x3, x3.flip(0), 2)
    yield lambda: direct(aten.square.default, x3)
    yield lambda: direct(aten.max_pool2d.default, x4, [3, 2], [2, 1], [1, 0], [1, 1], True)
    for ceil in (False, True):
        yield lambda ceil=ceil: F.max_pool2d(x4, 3, 2, 1, ceil_mode=ceil)
        yield lambda ceil=ceil: F.max_pool2d(x4, 2, 1, 0, dilation=2, ceil_mode=ceil, return_indices=True)
        yield lambda ceil=ceil: F.avg_pool2d(x4, 3, 2, 1, ceil_mode=ceil)
        yield lambda ceil=ceil: F.avg_pool2d(x4, (2, 3), 2, 1, ceil_mode=ceil, count_include_pad=False)
    yield lambda: torch.ops.aten.max_pool2d(x4, [2, 2], [2, 2])
    yield lambda: F.max_pool3d(r(1, 2, 5, 4, 6, dtype=dt), 2, return_indices=True)
    yield lambda: F.avg_pool2d(x4, 2, divisor_override=3)
    yield lambda: F.avg_pool3d(r(1, 2, 5, 4, 6, dtype=dt), 2, padding=1)
    yield lambda: F.adaptive_avg_pool2d(x4, (2, 4))
    yield lambda: F.adaptive_avg_pool2d(x4, 3)
    yield lambda: F.adaptive_avg_pool3d(r(1, 2, 5, 4, 6, dtype=dt), (2, 3, 4))
    for size in ((7, 9), (10, 12), (3, 2)):
        yield lambda size=size: F.interpolate(x4, size=size, mode="nearest")
        yield lambda size=size: F.interpolate(x4, size=size, mode="nearest-exact")
        yield lambda size=size: F.interpolate(x4, size=size, mode="bilinear")
        yield lambda size=size: F.interpolate(x4, size=size, mode="bilinear", align_corners=True)
    yield lambda: F.interpolate(x4, scale_factor=1.7, mode="bilinear")
    yield lambda: F.interpolate(x4, scale_factor=2.3, mode="nearest")
    yield lambda: F.interpolate(x3, size=9, mode="linear")
    yield lambda: F.interpolate(x3, size=4, mode="nearest")
    yield lambda: F.interpolate(x3, size=5, mode="nearest-exact")
    v5 = r(1, 2, 3, 4, 5, dtype=dt)
    yield lambda: F.interpolate(v5, size=(4, 6, 3), mode="trilinear")
    yield lambda: F.interpolate(v5, size=(4, 6, 3), mode="nearest")
    yield lambda: F.interpolate(v5, size=(4, 6, 3), mode="nearest-exact")


def _fast_path(module, dt, x, key_padding=None, **kwargs):
    """An nn transformer module in eval mode without grad: its fused ATen op (_transformer_encoder_layer_fwd,
    _native_multi_head_attention)."""
    module = module.to(dt).eval()
    with torch.no_grad():
        if isinstance(module, torch.nn.MultiheadAttention):
            return module(x, x, x, key_padding_mask=key_padding, **kwargs)
        return module(x, src_key_padding_mask=key_padding)


FAILED_WORKLOADS = []


def harvest(dtypes):
    calls = _SINK
    for dt in dtypes:
        torch.manual_seed(0)
        for work in workloads(dt):
            try:
                with Harvest(calls):
                    work()
            except (NotImplementedError, RuntimeError) as exc:
                FAILED_WORKLOADS.append((dt, str(exc).splitlines()[0]))  # eager lacks this op for this dtype
    return calls


CALLS = harvest(FLOATS)
TOLERANCE = {torch.float32: (1e-5, 1e-4), torch.float64: (1e-9, 1e-7), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}


def _dtype_of(args):
    for t in tree_flatten(args)[0]:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.dtype
    return torch.float32


def _run(fn, func, args, kwargs):
    args, kwargs = tree_map(_copy, args), tree_map(_copy, kwargs)
    torch.manual_seed(1234)
    out = fn(*args, **kwargs)
    return out, args, kwargs


def _ids():
    seen = collections.Counter()
    for func, args, _ in CALLS:
        name = f"{func}-{str(_dtype_of(args)).replace('torch.', '')}"
        seen[name] += 1
        yield f"{name}-{seen[name]}"


@pytest.mark.parametrize("call", CALLS, ids=list(_ids()))
def test_decomposition_matches_op(call):
    func, args, kwargs = call
    expected, e_args, e_kwargs = _run(func, func, args, kwargs)
    got, g_args, g_kwargs = _run(TABLE[func], func, args, kwargs)
    if got is NotImplemented:
        pytest.skip("the decomposition leaves this call whole")
    atol, rtol = TOLERANCE[_dtype_of(args)]
    if func in (aten.empty_like.default, aten.new_empty.default):
        got, expected = tree_map(lambda t: t.shape, got), tree_map(lambda t: t.shape, expected)
    if isinstance(expected, tuple) and func in (aten._native_batch_norm_legit.default, aten.native_batch_norm.default) and not args[5]:
        expected, got = expected[0], got[0]  # eval mode's saved stats are empty placeholders
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol, equal_nan=True)
    tensors = lambda tree: [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]  # noqa: E731
    torch.testing.assert_close(tensors((g_args, g_kwargs)), tensors((e_args, e_kwargs)), atol=atol, rtol=rtol, equal_nan=True)


# Decompositions only reached on other devices or through paths this CPU workload does not take.
NOT_HARVESTED = {
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    aten.embedding.default,  # eager's CPU embedding is a CompositeExplicit kernel reached above the mode
    aten.cudnn_batch_norm.default, aten.cudnn_batch_norm_backward.default,  # CUDA only: test_cudnn_batch_norm
    aten.cudnn_grid_sampler.default,  # CUDA only: test_cudnn_grid_sampler
    aten.div.Tensor_mode,  # bf16/f16 only: tests/codegen/test_edge_shapes.py::test_low_precision_rounding_division_equals_eager
    aten._use_cudnn_ctc_loss.default, aten._use_cudnn_ctc_loss.Tensor,  # CUDA only: a query, answered False
} | {op for op, fn in TABLE.items() if fn.__module__.startswith("kiln.decomp.backward")}  # tests/decomp/test_backward.py
# tests/decomp/test_coverage_decomps.py (eager op vs decomposition) and tests/lower/test_coverage_ops.py (end to end)
NOT_HARVESTED |= {op for op, fn in TABLE.items() if fn.__module__.rsplit(".", 1)[-1] in (
    "factory", "special_math", "bessel", "bessel_special", "bessel_jy", "layout", "coverage", "selection", "adaptive_max",
    "windows", "metric", "bicubic", "grid_sampler", "histogram", "embedding_bag")}  # (test_grid_sampler_histc.py, test_embedding_bag.py)


@pytest.mark.parametrize("default", [torch.float32, torch.float64])
def test_zeros_and_ones_without_dtype_take_the_default_dtype(default):
    """full() infers its dtype from the fill value (1 -> int64); zeros() and ones() do not."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        for op in (aten.zeros.default, aten.ones.default):
            got = TABLE[op]([2, 3])
            assert got.dtype == default and torch.equal(got, op([2, 3]))
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize("training", [True, False])
def test_cudnn_batch_norm(training):
    """cuDNN's batch norm (CUDA only) against native_batch_norm's CPU kernel: same output, same update
    of the running statistics in place (the op's schema hides it), cuDNN's empty stats in eval."""
    x, w, b = torch.randn(4, 3, 5, 5), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    rm2, rv2 = rm.clone(), rv.clone()
    out, mean, invstd, reserve = TABLE[aten.cudnn_batch_norm.default](x, w, b, rm, rv, training, 0.1, 1e-5)
    want = aten.native_batch_norm.default(x, w, b, rm2, rv2, training, 0.1, 1e-5)
    torch.testing.assert_close(out, want[0])
    torch.testing.assert_close((rm, rv), (rm2, rv2))
    assert reserve.numel() == 0 and reserve.dtype == torch.uint8
    if training:
        torch.testing.assert_close((mean, invstd), want[1:])
        grad = torch.randn_like(x)
        got = TABLE[aten.cudnn_batch_norm_backward.default](x, grad, w, rm, rv, mean, invstd, 1e-5, reserve)
        expected = aten.native_batch_norm_backward.default(grad, x, w, rm, rv, mean, invstd, True, 1e-5, [True] * 3)
        torch.testing.assert_close(got, expected)
    else:
        assert mean.numel() == 0 and invstd.numel() == 0


def test_cudnn_grid_sampler():
    x, grid = torch.randn(2, 3, 5, 6), torch.rand(2, 4, 7, 2) * 2 - 1
    want = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    torch.testing.assert_close(TABLE[aten.cudnn_grid_sampler.default](x, grid), want)


def test_every_decomposition_is_exercised():
    harvested = {func for func, _, _ in CALLS}
    missing = sorted(str(op) for op in TABLE if op not in harvested and op not in NOT_HARVESTED)
    assert not missing, f"decompositions with no test call: {missing}"


def test_decompositions_bottom_out_in_core_ops():
    """Tracing the workloads with every decomposition yields (almost) only core ops."""
    import torch.fx as fx

    from kiln.aot import aot_trace

    # (ATen's CPU flash attention is a library call in inference: decomp/attention.py keep_cpu_flash)
    allowed_non_core = {aten.native_dropout.default, aten._scaled_dot_product_flash_attention_for_cpu.default}
    leftovers = collections.Counter()
    for work in workloads(torch.float32):
        gm = fx.GraphModule(torch.nn.Module(), fx.Graph())
        graph = gm.graph
        graph.output(graph.call_function(work))
        gm.recompile()
        try:
            ag = aot_trace(gm, [], decompositions=TABLE)
        except Exception:  # data-dependent programs are covered elsewhere
            continue
        for n in ag.gm.graph.nodes:
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.target not in CORE_OPS:
                leftovers[str(n.target)] += 1
    leftovers = {k: v for k, v in leftovers.items() if k not in {str(o) for o in allowed_non_core}}
    assert set(leftovers) <= EXPECTED_NON_CORE, sorted(set(leftovers) - EXPECTED_NON_CORE)


# ops the workloads use that stay whole on purpose (no decomposition yet)
EXPECTED_NON_CORE = {"aten.sigmoid.default", "aten.relu.default"}
