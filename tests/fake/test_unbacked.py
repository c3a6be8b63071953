"""Unbacked symbols in the ShapeEnv (u0, ...) and the fake rules of data-dependent ops."""
import pytest
import sympy
import torch

from kiln.fake import UnsupportedFakeOp, fake_from_real
from kiln.fake.symbolic import DataDependentSize, ShapeEnv, symbolic_fake
from kiln.fake.unbacked import allow_unbacked


def test_unbacked_symbol_has_range_but_no_hint():
    env = ShapeEnv()
    u = env.create_unbacked("nonzero", 0, 12)
    n = env.symint(u)
    assert str(u) == "u0" and n.node.hint is None and not n.node.has_hint()
    assert env.static_value(sympy.Ge(u, 0)) is True and bool(n + 1 > 0)  # decided by its range
    assert not env.guards and env.unbacked_failed is None
    assert str(n * 2 + 1) == "2*u0 + 1"


@pytest.mark.parametrize("ask", [lambda n: bool(n > 3), lambda n: int(n), lambda n: bool(n == 1)])
def test_undecided_fact_raises_and_is_remembered(ask):
    env = ShapeEnv()
    n = env.symint(env.create_unbacked("item"))
    with pytest.raises(DataDependentSize):
        ask(n)
    assert env.unbacked_failed is not None and not env.guards  # never a guessed guard


def test_specialize_all_refuses_unbacked():
    env = ShapeEnv()
    env.create_unbacked("nonzero")
    with pytest.raises(DataDependentSize):
        env.specialize_all()


def test_heuristic_hint_stays_in_range():
    env = ShapeEnv()
    u = env.create_unbacked("x", 0, 10)
    assert env.heuristic_hint(u) == 10 and env.heuristic_hint(2 * u + 1) == 21
    with pytest.raises(DataDependentSize):
        env.size_hint(u)


def test_fake_rules_make_unbacked_sizes():
    env = ShapeEnv()
    x, m = fake_from_real(torch.randn(4, 5)), fake_from_real(torch.rand(4, 5) > 0.5)
    with allow_unbacked(env):
        nz = torch.nonzero(x)
        rows = x[m[:, 0]]
        sel = x.masked_select(m)
        k = fake_from_real(torch.tensor(3)).item()
        assert str(tuple(nz.shape)) == "(u0, 2)" and tuple(nz.stride())[0] == 1  # (column-major, as eager)
        assert str(tuple(rows.shape)) == "(u1, 5)" and str(tuple(sel.shape)) == "(u2,)"
        assert str(k) == "u3"
        assert str(tuple((rows @ torch.randn(5, 2)).shape)) == "(u1, 2)"
        assert str(tuple(torch.cat([sel, sel]).shape)) == "(2*u2,)"
        assert tuple((sel * 2).sum().shape) == ()
    assert env.upper[sympy.Symbol("u0", integer=True, nonnegative=True)] == 20


def test_without_env_data_dependent_ops_refuse():
    with pytest.raises(UnsupportedFakeOp):
        torch.nonzero(fake_from_real(torch.randn(3)))


def test_broadcast_of_unbacked_with_other_size_raises():
    env = ShapeEnv()
    x = symbolic_fake(torch.randn(6), env, "L['x']", {0})
    with allow_unbacked(env):
        y = x[x > 0]
        with pytest.raises(DataDependentSize):
            y + x  # u0 against s0: equal, or u0 == 1, is not known
