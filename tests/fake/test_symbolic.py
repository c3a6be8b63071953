"""The symbolic shape stage: ShapeEnv facts and guards, SymNode arithmetic, symbolic fakes and view rules."""
import pytest
import sympy
import torch

from kiln.fake.symbolic import ShapeEnv, SpecializationError, symbolic_fake
from kiln.fake.symbolic_meta import SymbolicShapeUnsupported


def _env_x(shape=(8, 16), dims=(0,)):
    env = ShapeEnv()
    x = symbolic_fake(torch.randn(*shape), env, "L['x']", set(dims))
    return env, x


def test_static_facts_need_no_guard():
    env, x = _env_x()
    s0 = x.shape[0]
    assert bool(s0 != 1) and bool(s0 >= 2) and not bool(s0 == 0)
    assert env.guards == []


def test_branch_records_guard_and_check_function():
    env, x = _env_x()
    s0 = x.shape[0]
    assert bool(s0 > 4) is True
    assert [str(g.fact) for g in env.guards] == ["s0 > 4"]
    check = env.check_function()
    assert check(torch.randn(9, 16)) is None
    assert "size(0) >= 5" in check(torch.randn(3, 16))  # the guard raised s0's lower bound
    assert check(torch.randn(9, 15)) is not None  # static dim
    assert check(torch.randn(9, 16).t().contiguous().t()) is not None  # strides


def test_int_specializes():
    env, x = _env_x()
    assert int(x.shape[0] * 2) == 16
    assert [str(g.fact) for g in env.guards] == ["Eq(2*s0, 16)"]
    assert env.check_function()(torch.randn(9, 16)) is not None


def test_marked_dim_refuses_to_specialize():
    env = ShapeEnv()
    x = symbolic_fake(torch.randn(8, 16), env, "L['x']", {0}, marked={0: (None, None)})
    with pytest.raises(SpecializationError, match="marked dynamic"):
        int(x.shape[0])


def test_duck_sizing_shares_symbols():
    env = ShapeEnv()
    x = symbolic_fake(torch.randn(8, 16), env, "L['x']", {0})
    y = symbolic_fake(torch.randn(8, 4), env, "L['y']", {0})
    assert str(x.shape[0]) == str(y.shape[0]) == "s0"
    check = env.check_function()
    assert check(torch.randn(5, 16), torch.randn(5, 4)) is None
    assert check(torch.randn(5, 16), torch.randn(6, 4)) is not None


def test_zero_and_one_stay_static():
    env = ShapeEnv()
    assert symbolic_fake(torch.randn(1, 16), env, "L['x']", {0}) is None


@pytest.mark.parametrize("op,shape", [
    (lambda x, s: x.view(s * 2, 8), "[2*s0, 8]"),
    (lambda x, s: x.view(-1), "[16*s0]"),
    (lambda x, s: x.reshape(-1, 4), "[4*s0, 4]"),
    (lambda x, s: x[None].expand(3, s, 16), "[3, s0, 16]"),
    (lambda x, s: x.permute(1, 0), "[16, s0]"),
    (lambda x, s: x[1:], "[s0 - 1, 16]"),
    (lambda x, s: x.narrow(0, 0, 2), "[2, 16]"),
    (lambda x, s: torch.cat([x, x]), "[2*s0, 16]"),
    (lambda x, s: x @ torch.randn(16, 4), "[s0, 4]"),
    (lambda x, s: torch.where(x > 0, x, 0.0), "[s0, 16]"),
    (lambda x, s: torch.arange(s, device="meta"), "[s0]"),
])
def test_ops_on_symbolic_fakes(op, shape):
    env, x = _env_x()
    out = op(x, x.shape[0])
    assert str(list(out.shape)) == shape


def test_view_of_noncontiguous_raises_as_eager():
    env, x = _env_x()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.t().view(-1)
    assert list(x.t().reshape(-1).shape) == [x.shape[0] * 16]  # reshape copies


def test_view_strides_of_a_permuted_tensor():
    env, x = _env_x((8, 4, 6), dims=(0,))
    y = x.permute(1, 0, 2)  # [4, s0, 6], strides [6, 24, 1]
    z = y.view(4, x.shape[0], 2, 3)
    assert [str(s) for s in z.stride()] == ["6", "24", "3", "1"]


def test_pointwise_op_keeps_the_input_layout():
    env, x = _env_x((8, 4), dims=(0,))
    out = x.t() * 2.5  # a transposed input: the result is transposed as well
    assert [str(s) for s in out.stride()] == ["1", "4"]
    assert out.dtype == torch.float32 and (x.t() > 0).dtype == torch.bool


def test_unsupported_op_is_reported(monkeypatch):
    from kiln.fake import symbolic_meta

    def refuse(func, *args, **kwargs):
        raise SymbolicShapeUnsupported(func, "no rule (test)")
    monkeypatch.setitem(symbolic_meta.RULES, torch.ops.aten.flip.default, refuse)
    env, x = _env_x()
    with pytest.raises(SymbolicShapeUnsupported):
        x.flip(0)
    assert env.failed and "flip" in env.failed


@pytest.mark.parametrize("op,shape", [
    (lambda x: torch.stack([x, x], 1), "[s0, 2, 16]"),
    (lambda x: x.unfold(0, 2, 1), "[s0 - 1, 16, 2]"),
    (lambda x: x.unfold(0, 3, 1), "[s0 - 2, 16, 3]"),
    (lambda x: torch.logsumexp(x, 0), "[16]"),
    (lambda x: (x < 0).sum(), "[]"),
    (lambda x: (x < 0).sum([0, 1]), "[]"),
    (lambda x: x.sum(0, keepdim=True), "[1, 16]"),
    (lambda x: x.t().sum(0), "[s0]"),
    (lambda x: torch.nn.functional.cross_entropy(x.view(-1, 4, 4, 1), (x.view(-1, 4, 4, 1).sum(1) > 0).long(),
                                                 reduction="none"), "[s0, 4, 1]"),
    (lambda x: torch.logsumexp(x, -1, keepdim=True), "[s0, 1]"),  # (s0 - 3) // 1 may be negative: no guard for // 1
    (lambda x: x.diagonal(1), "[Min(15, s0)]"),
])
def test_more_view_rules(op, shape):
    env, x = _env_x()
    assert str(list(op(x).shape)) == shape
    # (a window of 3 needs s0 >= 3, eager's check: the sizes start at 2, so it is guarded)
    assert [str(g.fact) for g in env.guards] == (["s0 >= 3"] if shape == "[s0 - 2, 16, 3]" else [])


def test_negative_size_mod_for_padding_to_a_multiple():
    env, x = _env_x()
    s0 = x.shape[0]
    from kiln.fake.symbolic import _py

    pad = (-s0) % 4  # was Eq(s0, 8): a specialization
    assert isinstance(pad, torch.SymInt) and env.guards == []
    source = _py(pad.node.expr)
    assert all(eval(source, {"s0": n}) == (-n) % 4 for n in range(2, 12))
    ceil = -(-s0 // 4)  # ceil division
    assert isinstance(ceil, torch.SymInt) and env.guards == []
    assert all(eval(_py(ceil.node.expr), {"s0": n}) == -(-n // 4) for n in range(2, 12))


def test_floor_division_facts_use_both_bounds_of_the_remainder():
    from kiln.loopir.index import FloorDiv, ModularIndexing

    env, x = _env_x()
    s0 = x.shape[0].node.expr
    assert env.static_value(sympy.Gt(FloorDiv(s0 + 1, 2), 0)) is True  # chunk(2)'s chunk size
    assert env.static_value(sympy.Le(ModularIndexing(s0, 1, 4), 3)) is True
    assert env.static_value(sympy.Le(ModularIndexing(s0, 1, 4), 2)) is None


def test_log_softmax_of_a_transposed_tensor_is_row_major():
    env, x = _env_x()
    y = torch.ops.aten._log_softmax(x.t(), 1, False)  # ATen's meta kernel: row-major for any input
    assert str(list(y.shape)) == "[16, s0]" and str(list(y.stride())) == "[s0, 1]"


def test_sum_over_dims_is_row_major_from_any_layout():
    env, x = _env_x()
    y = x.view(-1, 4, 4).permute(2, 0, 1).sum(1)  # ATen's resize_reduction: default strides
    assert str(list(y.shape)) == "[4, 4]" and list(y.stride()) == [4, 1]


def test_sum_of_a_bool_mask_is_int64():
    env, x = _env_x()
    assert (x < 0).sum().dtype == torch.int64 and x.sum(dtype=torch.float64).dtype == torch.float64


def test_any_all_eye_and_floor_divide_on_symbolic_sizes():
    # their C++ kernels ask for plain sizes (any/all raised an internal assert): kiln's rules
    env, x = _env_x()
    m = x > 0
    assert str(list(m.any(1).shape)) == "[s0]" and m.any(1).dtype == torch.bool
    assert str(list(m.all(0, keepdim=True).shape)) == "[1, 16]" and m.all().dim() == 0
    assert str(list(torch.ops.aten.any.dims(m, [0, 1]).shape)) == "[]"
    assert x.to(torch.uint8).any(0).dtype == torch.uint8
    n = x.shape[0]
    from kiln.fake import FakeTensorMode

    with FakeTensorMode():  # (a factory: the mode makes the fake)
        eye = torch.eye(n)
        assert str(list(eye.shape)) == "[s0, s0]" and eye.dtype == torch.float32
        assert str(list(torch.eye(n, 3, dtype=torch.int64).shape)) == "[s0, 3]"
    q = torch.ops.aten.floor_divide(x.to(torch.int64), 3)
    assert str(list(q.shape)) == "[s0, 16]" and q.dtype == torch.int64
    assert env.failed is None and env.guards == []


def test_native_group_norm_and_its_backward_on_symbolic_sizes():
    env, x = _env_x((2, 4, 6, 5), dims=(0, 2, 3))
    n, c, hw = x.shape[0], 4, x.shape[2] * x.shape[3]
    w = torch.ones(4)
    out, mean, rstd = torch.ops.aten.native_group_norm(x, w, w, n, c, hw, 2, 1e-5)
    assert str(list(out.shape)) == "[s0, 4, s1, s2]" and str(list(mean.shape)) == "[s0, 2]"
    gi, gw, gb = torch.ops.aten.native_group_norm_backward(out, x, mean, rstd, w, n, c, hw, 2, [True, True, False])
    assert str(list(gi.shape)) == "[s0, 4, s1, s2]" and list(gw.shape) == [4] and gb is None
    assert env.failed is None


def test_view_minus_one_divides_exactly_or_raises():
    from kiln.fake.symbolic_meta import _exact_div

    env, x = _env_x()
    y = x[x.shape[0] - 4:]  # 16 * (s0 - Min(s0, Max(0, s0 - 4))) elements: 64 at every size >= 4
    assert str(y.view(-1, 8).shape[0]) == "2*s0 - 2*Min(s0, Max(0, s0 - 4))"
    with pytest.raises(RuntimeError):  # was a size 16*s0/7 - 16*Min(..)/7
        y.view(-1, 7)
    # static sizes of a view at a symbolic offset (x[-10:].view(-1, 2) once s0 > 10 is guarded)
    assert _exact_div(64, 8) == 8
    with pytest.raises(RuntimeError):
        _exact_div(64, 7)


def test_small_constant_mod_and_floordiv_of_a_size():
    env, x = _env_x()
    s0 = x.shape[0]
    assert str(1 % s0) == "1" and str(1 // s0) == "0"  # roll's shift: s0 >= 2
    assert str((s0 % 3).node.expr) == "ModularIndexing(s0, 1, 3)"
    assert env.guards == []


def test_slice_to_size_one_records_no_contiguity_guard():
    env, x = _env_x()
    s0 = x.shape[0]
    y = x[: s0 - 1]  # a size s0 - 1 (1 where s0 == 2): ATen's contiguity fast path asks if it is 1
    z = torch.cat([x[s0 - 1:], y])
    assert z.shape[0] == s0 and env.guards == []


def test_guard_or_false_answers_the_default_without_a_guard():
    env, x = _env_x()
    s0 = x.shape[0]
    assert (s0 - 1 == 1).node.guard_or_false() is False
    assert (s0 - 1 == 1).node.guard_or_true() is True
    assert (s0 == 1).node.guard_or_true() is False  # decided for every size: not the default
    assert env.guards == []


def test_without_divisions_shares_a_remainder_and_keeps_min_max_unevaluated():
    from kiln.fake.symbolic import _without_divisions
    from kiln.loopir.index import FloorDiv

    s0 = sympy.Symbol("s0", integer=True, positive=True)
    out = _without_divisions(FloorDiv(s0, 2) + sympy.Max(FloorDiv(s0, 2), 3))
    assert len([s for s in out.free_symbols if s.name.startswith("_r")]) == 1
    assert out.has(sympy.Max)  # (rebuilt with evaluate=False: evaluating Min/Max again was most of the time)


def test_ceil_floor_trunc_of_a_float_made_of_sizes():
    """math.ceil/floor/trunc of a SymFloat (torch's Python meta functions take them of sizes times
    scales): the value of the float at the hints, rounded the right way (ceil(7.5) is 8, floor(-7.5) is
    -8: the int was truncated before rounding once), with the sizes specialized."""
    import math

    for n, scale in [(5, 1.5), (7, -1.5), (9, 0.25), (8, 2.0)]:
        env, x = _env_x(shape=(n, 4))
        value = x.shape[0] * scale
        assert math.ceil(value) == math.ceil(n * scale)
        assert math.floor(value) == math.floor(n * scale)
        assert math.trunc(value) == math.trunc(n * scale)
        assert env.check_function()(torch.randn(n + 1, 4)) is not None  # the size is a constant now
