"""kiln's fast fake rules (fake/fast_meta.py) against the ops' own meta kernels: wherever a rule gives
an output, it has the meta kernel's shape, strides and dtype; wherever the meta kernel raises, the
rule gives nothing (the meta kernel then raises as eager would)."""
import itertools

import pytest
import torch

from kiln.fake.fast_meta import PROMOTION, RULES, fast_meta

aten = torch.ops.aten
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.uint8,
          torch.bool]
SHAPES = [(2, 3), (3,), (1, 3), (2, 1), (), (4, 2, 3)]
OTHER_DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool]


def _meta(shape, dtype, transposed=False):
    t = torch.empty(shape, dtype=dtype, device="meta")
    return t.t() if transposed and t.dim() == 2 else t


def _same(func, args, kwargs=None):
    """Asserts the rule and the meta kernel agree; returns whether the rule covered the call."""
    kwargs = kwargs or {}
    got = fast_meta(func, args, kwargs)
    try:
        want = func(*args, **kwargs)
    except Exception:  # noqa: BLE001 -- eager rejects these arguments: the rule must not accept them
        assert got is None, (func, args, kwargs)
        return False
    if got is None:
        return False
    pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]
    for g, w in pairs:
        assert (g.shape, g.dtype, g.device) == (w.shape, w.dtype, w.device), (func, args, kwargs)
        assert g.stride() == w.stride(), (func, args, kwargs, g.stride(), w.stride())
    return True


@pytest.mark.parametrize("func", sorted((op for op in PROMOTION), key=str), ids=str)
def test_elementwise_rules_match_meta_kernels(func):
    covered = 0
    binary = len(func._schema.arguments) >= 2 and func._schema.arguments[1].name == "other"
    scalar = binary and str(func._schema.arguments[1].type) == "number"
    kwargs_options = {aten.gelu.default: [{}, {"approximate": "tanh"}],
                      aten.div.Tensor_mode: [{"rounding_mode": "floor"}, {"rounding_mode": None}]}.get(func, [{}])
    for dtype, shape, kwargs in itertools.product(DTYPES, SHAPES, kwargs_options):
        a = _meta(shape, dtype)
        if not binary:
            covered += _same(func, (a,), kwargs)
            covered += _same(func, (_meta(shape, dtype, transposed=True),), kwargs)
            continue
        others = [2, 2.5, True] if scalar else [_meta(s, d) for d in OTHER_DTYPES for s in SHAPES[:4]] + [2, 0.5, True]
        for other in others:
            covered += _same(func, (a, other), kwargs)
            if not scalar and isinstance(other, torch.Tensor):
                covered += _same(func, (other, a), kwargs)
        if func in (aten.add.Tensor, aten.sub.Tensor):
            covered += _same(func, (a, a), {"alpha": 2})
            covered += _same(func, (a, a), {"alpha": 1})
    assert covered > 0


def test_where_matches_meta_kernel():
    covered = 0
    for d1, d2, s1, s2 in itertools.product(DTYPES, DTYPES, SHAPES[:4], SHAPES[:4]):
        covered += _same(aten.where.self, (_meta(s1, torch.bool), _meta(s1, d1), _meta(s2, d2)))
    covered += _same(aten.where.self, (_meta((2, 3), torch.float32), _meta((2, 3), torch.float32),
                                       _meta((2, 3), torch.float32)))  # non-bool condition: left to the kernel
    assert covered > 0


def test_broadcast_errors_and_strided_operands_are_left_to_the_kernel():
    a, b = _meta((2, 3), torch.float32), _meta((4, 3), torch.float32)
    assert fast_meta(aten.add.Tensor, (a, b), {}) is None  # the kernel raises the shape error
    assert fast_meta(aten.add.Tensor, (_meta((3, 2), torch.float32, transposed=True), a), {}) is None
    assert fast_meta(aten.sub.Tensor, (_meta((2,), torch.bool), _meta((2,), torch.bool)), {}) is None
    odd = torch.empty_strided((3, 1), (1, 7), device="meta")  # contiguous, but a size-1 dim's stride is kept
    assert odd.is_contiguous() and fast_meta(aten.add.Tensor, (odd, _meta((3, 4), torch.float32)), {}) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64])
def test_matmul_and_layer_norm_rules_match_meta_kernels(dtype):
    m = lambda *s: _meta(s, dtype)  # noqa: E731
    assert _same(aten.mm.default, (m(4, 3), m(3, 5))) == (dtype is not torch.int64)
    _same(aten.mm.default, (m(4, 3), m(2, 5)))
    _same(aten.mm.default, (m(4, 3), _meta((3, 5), torch.float64)))
    t = lambda *s: _meta(s[::-1], dtype).transpose(-1, -2)  # noqa: E731  (a transposed operand)
    _same(aten.mm.default, (t(4, 3), t(3, 5)))
    _same(aten.addmm.default, (m(5), m(4, 3), t(3, 5)))
    _same(aten.addmm.default, (_meta((5, 4), dtype).t(), t(4, 3), m(3, 5)))
    _same(aten.bmm.default, (m(2, 4, 3), _meta((2, 5, 3), dtype).transpose(1, 2)))
    _same(aten.bmm.default, (m(2, 4, 3), m(2, 3, 5)))
    _same(aten.bmm.default, (m(2, 4, 3), m(1, 3, 5)))
    for bias in (m(5), m(4, 5), m(1, 5), m(4, 1), m(3)):
        _same(aten.addmm.default, (bias, m(4, 3), m(3, 5)))
    _same(aten.addmm.default, (m(5), m(4, 3), m(3, 5)), {"beta": 2})
    for shape, norm in (((2, 3, 4), [4]), ((2, 3, 4), [3, 4]), ((2, 3, 4), [3]), ((4,), [4])):
        for wb in (None, m(*norm)):
            _same(aten.native_layer_norm.default, (m(*shape), norm, wb, wb, 1e-5))
    _same(aten.native_layer_norm.default, (_meta((4, 3), dtype, transposed=True), [4], None, None, 1e-5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64])
def test_batch_norm_rules_match_meta_kernels(dtype):
    covered = 0
    for shape in ((2, 6, 5, 4), (2, 6), (3, 6, 7), (1, 6, 1, 1), (2, 1, 3, 3), (2, 6, 1, 4)):
        c = shape[1]
        x = _meta(shape, dtype)
        layouts = [x, x.transpose(-1, -2)]
        if len(shape) == 4:
            layouts.append(x.to(memory_format=torch.channels_last))
        for x in layouts:
            for stats in ((_meta((c,), dtype),) * 4, (None,) * 4, (None, None, _meta((c,), dtype), _meta((c,), dtype)),
                          (_meta((c,), torch.float32),) * 4, (_meta((c + 1,), dtype),) * 4):
                for training in (False, True):
                    covered += _same(aten.native_batch_norm.default, (x, *stats, training, 0.1, 1e-5))
                    covered += _same(aten._native_batch_norm_legit.default, (x, *stats, training, 0.1, 1e-5))
                covered += _same(aten._native_batch_norm_legit_no_training.default, (x, *stats, 0.1, 1e-5))
    assert covered > 0 or dtype is torch.int64


@pytest.mark.parametrize("func", [aten._softmax.default, aten._log_softmax.default], ids=str)
def test_softmax_rules_match_meta_kernels(func):
    covered = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
        for shape, dim in (((2, 3, 4), -1), ((2, 3, 4), 1), ((5,), 0), ((), 0)):
            for half_to_float in (False, True):
                covered += _same(func, (_meta(shape, dtype), dim, half_to_float))
            covered += _same(func, (_meta(shape, dtype, transposed=True), dim, False))
    assert covered > 0


@pytest.mark.parametrize("func", [aten._softmax.default, aten._log_softmax.default], ids=str)
def test_softmax_over_a_dim_out_of_range_raises_as_eager(func):
    # the meta kernel lets dim 2 of a 2-d tensor through; eager's CPU kernel raises IndexError: so does the rule
    for shape, dim in (((2, 3), 2), ((2, 3), -3), ((5,), 1)):
        with pytest.raises(IndexError):
            func(torch.randn(shape), dim, False)
        with pytest.raises(IndexError, match="Dimension out of range"):
            fast_meta(func, (_meta(shape, torch.float32), dim, False), {})


def test_every_rule_is_for_an_op():
    assert all(isinstance(op, torch._ops.OpOverload) for op in RULES)


def test_number_other_is_covered_with_the_meta_kernels_dtype():
    # x * 0.125 as capture passes it (a Python number as a Tensor op's other); without the rule, torch's
    # reference kernel runs (and its first call imports torch._dynamo)
    for func, x, other in [(aten.mul.Tensor, _meta((2, 3), torch.float16), 0.125),
                           (aten.div.Tensor, _meta((2, 3), torch.int64), 2),
                           (aten.add.Tensor, _meta((4, 2, 3), torch.int32), 1.5)]:
        assert _same(func, (x, other))
    assert fast_meta(aten.add.Tensor, (_meta((2,), torch.bool), 1), {}) is None
    assert fast_meta(aten.maximum.default, (_meta((2,), torch.float32), 1.0), {}) is None
