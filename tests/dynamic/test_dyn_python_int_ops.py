"""Python int operations on sizes and int arguments that stay symbolic: ``min(x.shape)``, ``n ** 2``,
``n // -3``, ``n % -3``, ``abs(n - 10)``, ``n in (1, 2, 3)``, ``torch.Size([n, 2, -1])``. Each used to
pin the value (a guard ``Eq(s0, 7)``: one graph per size until the recompile limit, then eager). Each
call is compared with eager (tensors and the Python numbers returned), and the graphs are counted."""
import math

import pytest
import torch

import kiln
from kiln.api import config_of


def compiles(compiled) -> int:
    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


def _equal(a, b):
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    return type(a) is type(b) and a == b


def run(fn, make_args, values, dynamic=None):
    compiled = kiln.compile(fn, dynamic=dynamic)
    for v in values:
        want, got = fn(*make_args(v)), compiled(*make_args(v))
        assert _equal(want, got), (v, want, got)
    return compiles(compiled)


SIZES = (5, 7, 9, 11, 13, 6, 8, 10)


def rows(n):
    return (torch.arange(n * 8, dtype=torch.float32).reshape(n, 8),)


# (program over x of n rows, most graphs over SIZES with dynamic=None): the static first graph, then one
# dynamic graph per outcome of the guards the operation makes
SIZE_PROGRAMS = {
    "min of the shape": (lambda x: (x * min(x.shape), min(x.shape)), 3),  # n < 8, then n >= 8
    "max of a list": (lambda x: x * max([x.shape[0], 3, x.shape[1]]), 3),
    "square": (lambda x: (x.new_zeros(x.shape[0] ** 2), x.shape[0] ** 2), 2),
    "cube and zeroth power": (lambda x: x * (x.shape[0] ** 3 + x.shape[1] ** 0), 2),
    "floor division by a negative int": (lambda x: (x * (x.shape[0] // -3), x.shape[0] // -3), 2),
    "remainder by a negative int": (lambda x: (x * (x.shape[0] % -3), x.shape[0] % -3), 2),
    "abs": (lambda x: (x * abs(x.shape[0] - 10), abs(x.shape[0] - 10)), 3),  # n < 10, then n >= 10
    "in a tuple": (lambda x: x * (2 if x.shape[0] in (1, 2, 3) else 3), 2),
    "not in a set": (lambda x: x * (2 if x.shape[0] not in {4, 40} else 3), 2),
    "torch.Size of a list": (lambda x: x.reshape(torch.Size([x.shape[0], 2, -1])), 2),
    "int of a half": (lambda x: (x.new_ones(int(x.shape[0] * 0.5)), int(0.25 * x.shape[0])), 2),
    "math.trunc of a ratio": (lambda x: (x * math.trunc(x.shape[0] / 4), math.floor(x.shape[0] / 4.0)), 2),
    # signs guarded: n < 9, n == 9 (both >= 0), n > 9
    "int of a signed half": (lambda x: (x * int((x.shape[0] - 9) * 0.5), math.trunc((9 - x.shape[0]) / 4)), 4),
    "int of a tenth (not exact: specialized, still right)": (lambda x: x * int(x.shape[0] * 0.1), 8),
    "sorted shape": (lambda x: (x * sorted(x.shape)[0], sorted(x.shape)), 3),  # n < 8, then n >= 8 (8: a tie)
    "sorted in reverse": (lambda x: x.new_zeros(sorted([x.shape[0], 9, x.shape[1]], reverse=True)), 4),
}


@pytest.mark.parametrize("name", list(SIZE_PROGRAMS))
def test_sizes(name):
    fn, most = SIZE_PROGRAMS[name]
    assert run(fn, rows, SIZES) <= most


@pytest.mark.parametrize("name", ["square", "floor division by a negative int", "in a tuple",
                                  "torch.Size of a list"])
def test_sizes_dynamic_true_one_graph(name):
    fn, _ = SIZE_PROGRAMS[name]
    assert run(fn, rows, SIZES, dynamic=True) == 1


def test_membership_that_holds_guards_the_match():
    def f(x):
        return x * (2 if x.shape[0] in (3, 5, 9) else 7)
    compiled = kiln.compile(f)
    for n in (5, 6, 9, 3, 4, 5, 10):
        (x,) = rows(n)
        torch.testing.assert_close(compiled(x), f(x))


# int arguments (symbols too, Options.dynamic_ints: values >= 2 are symbols), with negative intermediate
# values: Python's floor and sign rules
INTS = (7, 8, 9, 12, 3, 5, 4, 16)


@pytest.mark.parametrize("op", [
    lambda n: (n - 8) // -3, lambda n: (n - 8) % -3, lambda n: n // -1, lambda n: (5 - n) % -1,
    lambda n: abs(5 - n), lambda n: (n - 6) ** 2, lambda n: abs(n - 4) ** 3, lambda n: min(n, 8 - n, 2),
    lambda n: max((n, 5)), lambda n: int(n in (3, 8, 40)), lambda n: int(n * 0.5), lambda n: math.trunc(n / 3),
    lambda n: int((n - 10) * 0.5), lambda n: math.ceil(n * 0.125),
])
def test_int_arguments(op):
    x = torch.ones(3)
    assert run(lambda x, n: (x * op(n), op(n)), lambda n: (x, n), INTS) <= 4


def test_division_by_a_negative_constant_is_exact_for_every_sign():
    """The stage itself: ``e // -k`` and ``e % -k`` are expressions, not values, and equal Python's at
    every value of the symbol the guards allow (a dividend of unknown sign is guarded on its sign)."""
    import sympy

    from kiln.fake.symbolic import ShapeEnv

    env = ShapeEnv()
    sym = env.create_symbol(7)
    n = env.symint(sym)
    checked = 0
    for k in (1, 3, 4):
        for i, e in enumerate((n - 9, 9 - n, n, n - 7)):
            q, r = (e // -k).node.expr, (e % -k).node.expr
            assert q.free_symbols == {sym}
            for v in (2, 5, 7, 9, 10, 13, 30):
                if not all(bool(g.fact.subs(sym, v)) for g in env.guards):
                    continue
                want = (v - 9, 9 - v, v, v - 7)[i]
                assert int(q.subs(sym, v).doit()) == want // -k, (e, k, v)
                assert int(r.subs(sym, v).doit()) == want % -k, (e, k, v)
                checked += 1
    assert checked >= 30
    assert not [g for g in env.guards if isinstance(g.fact, sympy.Eq)]


# ops whose C++ kernels trip torch's argument parser on symbolic sizes: fake rules of their own
# (kiln/fake/symbolic_meta.py), one dynamic graph instead of one per size
OP_PROGRAMS = {
    "count_nonzero over a dim": lambda x: torch.count_nonzero(x > 20, 1),
    "count_nonzero over dims": lambda x: torch.count_nonzero(x > 20, (0, 1)),
    "count_nonzero of all": lambda x: torch.count_nonzero(x > 20),
    "count_nonzero over no dims (all)": lambda x: (torch.count_nonzero(x > 20, []), torch.count_nonzero(x, []).dim()),
    "diag_embed": lambda x: torch.diag_embed(x),
    "take_along_dim": lambda x: torch.take_along_dim(x, x.argsort(1), 1),
    "take_along_dim broadcast, negative dim": lambda x: x.take_along_dim(x[:1].argsort(-1)[:, :3], dim=-1),
    "take_along_dim flattened": lambda x: torch.take_along_dim(x, x.reshape(-1).argsort()[:5]),
    "diag_embed with an offset and dims": lambda x: torch.diag_embed(x[:, :3], offset=-1, dim1=0, dim2=2),
    "kron": lambda x: torch.kron(x, torch.full((2, 3), 0.5)),
    "kron of ranks 1 and 2 (method)": lambda x: x[:, 1].kron(x[:2, :2]),
    "unfold": lambda x: torch.nn.functional.unfold(x.reshape(1, 2, -1, 4), 2),
    "unfold with dilation, padding, stride": lambda x: torch.nn.functional.unfold(
        x.reshape(1, 1, -1, 8), (2, 3), dilation=(1, 2), padding=1, stride=2),
    "unfold unbatched": lambda x: torch.nn.functional.unfold(x.reshape(2, -1, 4), (3, 2)),
    "diag of a matrix": lambda x: (x @ x.t()).diag() * 2,
    "diag with an offset, diagonal_copy": lambda x: torch.diag(x @ x.t(), 1) + torch.diagonal_copy(x @ x.t(), -1),
    "diagonal_scatter": lambda x: torch.diagonal_scatter(x @ x.t(), x[:, 2] * 2),
    "diagonal_scatter with an offset": lambda x: torch.diagonal_scatter(x @ x.t(), x[1:, 0] + 1, 1),
}


@pytest.mark.parametrize("name", list(OP_PROGRAMS))
def test_ops(name):
    assert run(OP_PROGRAMS[name], rows, SIZES) == 2


def test_fake_rules_match_eager_layouts():
    from kiln.fake.symbolic import ShapeEnv, symbolic_fake

    env = ShapeEnv()
    real = torch.randn(6, 5, 4)
    x = symbolic_fake(real, env, "L['x']", {0, 1})
    for fn in (lambda t: torch.count_nonzero(t, 1), lambda t: torch.count_nonzero(t, (0, 2)),
               lambda t: torch.diag_embed(t), lambda t: torch.diag_embed(t, 2, 0, 3),
               lambda t: torch.diag_embed(t, -1, 1, 0), lambda t: torch.diagonal_scatter(t, t[0].t()),
               lambda t: torch.diagonal_scatter(t, t[:3, 0, :].t(), -2, 1, 0),
               lambda t: torch.diagonal_scatter(t, t[:, 0, :2], 3, 2, 1)):
        want, got = fn(real), fn(x)
        assert [int(n) for n in got.shape] == list(want.shape)
        assert [int(n) for n in got.stride()] == list(want.stride()) and got.dtype == want.dtype


def test_bools_compare_as_the_ints_they_equal():
    """``n - 1 in (True, 7)`` is ``n - 1 == 1`` for Python (as a sympy value a bool equalled no int)."""
    def f(x, n):
        return (n - 1) in (True, 7), (n - 1) not in {True, 40}, (n - 1) == True, n + True  # noqa: E712

    def g(x):
        return x.shape[0] - 1 in (True, 9), x * (x.shape[0] - True)

    for dynamic in (None, True):
        run(f, lambda n: (torch.zeros(n), n), (5, 6, 2, 8, 2), dynamic=dynamic)
        run(g, lambda n: (torch.ones(n),), (5, 6, 2, 10, 2), dynamic=dynamic)


def test_powers_that_leave_int64_are_not_computed_in_kernels():
    """A kernel computes ``n ** 8`` in int64: the power is guarded to fit (255 ** 8 does not: a size
    beyond compiles for its value, as eager computes it with Python ints)."""
    def f(x):
        return torch.arange((x.shape[0] ** 8) % 1000).sum()

    def g(x, n):
        return x.new_ones((n ** 3) % 1000) * 2

    run(f, lambda n: (torch.zeros(n),), (7, 9, 255, 257, 1000, 8), dynamic=True)
    run(g, lambda n: (torch.zeros(2), n), (7, 9, 2097151, 2097153, 3000017, 11))


def test_take_along_dim_errors_as_eager():
    compiled = kiln.compile(lambda x: torch.take_along_dim(x, torch.zeros(3, 2, dtype=torch.int64), 1), dynamic=True)
    for n in (5, 7):
        with pytest.raises(RuntimeError, match="must match the size of tensor b"):
            compiled(torch.randn(n, 4))


@pytest.mark.parametrize("fn", [lambda x: torch.linspace(0, 1, x.shape[0]) + x[:, 0],
                                lambda x: torch.linspace(-3.5, 2, x.shape[0] * 3, dtype=torch.float64),
                                lambda x: torch.linspace(10, -7, x.shape[0] - 2) * 2])
def test_linspace_of_a_size_is_one_dynamic_graph(fn):
    """``torch.linspace(a, b, n)`` with ``n`` from a size: ATen's schema takes a plain int, so the call
    pinned the size; kiln's decomposition runs with the count as a kernel argument (values within a
    rounding of eager's, as kiln's static linspace)."""
    compiled = kiln.compile(fn)
    for n in SIZES:
        x = rows(n)[0]
        torch.testing.assert_close(compiled(x), fn(x))
    assert compiles(compiled) == 2


def test_linspace_with_a_negative_count_errors_as_eager():
    compiled = kiln.compile(lambda x: torch.linspace(0, 1, x.shape[0] - 7), dynamic=True)
    for n in (9, 11, 5):
        x = torch.zeros(n)
        if n > 7:
            torch.testing.assert_close(compiled(x), torch.linspace(0, 1, n - 7))
        else:
            with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
                compiled(x)


def test_int_round_floor_of_an_int_are_that_int():
    """``int(n)``, ``round(n)``, ``math.floor(n)`` of an int argument (or of ``k.item()``) give the int
    itself: they pinned its value (a guard ``Eq(s0, 5)``: one graph per value)."""
    def f(x, n):
        return x[:int(n)] * round(n) + math.floor(n) - math.ceil(n) + math.trunc(n), int(n) + 1

    def g(x, k):
        m = int(k.item())  # (a graph break: m is an int argument of the resume function)
        return x[:m].sum(), round(m) * 2

    assert run(f, lambda v: (torch.arange(12.0), v), (3, 5, 7, 9, 11)) == 2
    assert run(g, lambda v: (torch.arange(12.0), torch.tensor(v)), (3, 5, 7, 9, 11)) == 2  # (the resume function)


def test_bool_of_a_size_is_a_guard_on_its_truth():
    """``bool(n - 5)`` decides as ``if n - 5:`` does, a guard on ``s0 - 5 != 0`` (it pinned the value)."""
    def f(x):
        return x * bool(x.shape[0] - 5), bool(x.shape[0] - 6)

    assert run(f, rows, (5, 7, 9, 11, 13, 6, 8)) == 3  # (static at 5; n other than 5 and 6; n == 6)


def test_diagonal_scatter_errors_as_eager():
    compiled = kiln.compile(lambda x: torch.diagonal_scatter(x, x[:, 0]), dynamic=True)
    for n in (5, 7):  # (the diagonal of n x 4 has 4 elements)
        with pytest.raises(RuntimeError, match="expected src to have a size equal to the slice of self"):
            compiled(torch.randn(n, 4))
    assert torch.equal(compiled(torch.ones(4, 4)), torch.ones(4, 4))


# a torch.Size local: one handed to the resume function at a graph break, or passed by the caller; its
# ints are int arguments (symbols once they change), sharing a tensor size's symbol where equal (guarded)
def _size_across_a_break(x):
    s = x.shape
    print("", end="")  # a graph break: the resume function gets s as an argument
    return x.reshape(s[0], -1) * s[0], s


@pytest.mark.parametrize("dynamic", [None, True])
def test_size_local_across_a_graph_break(dynamic):
    assert run(_size_across_a_break, rows, SIZES, dynamic=dynamic) <= 4  # two frames, static then dynamic


def test_size_argument_independent_of_the_tensor():
    def f(x, shape):
        return x.new_zeros(shape) + x.sum(), shape[0] * 2

    values = [(5, 5), (7, 9), (9, 9), (6, 11), (4, 4), (12, 3), (8, 8)]  # equal, then not, then again
    compiled = kiln.compile(f)
    for m, n in values:
        x, shape = torch.ones(m, 2), torch.Size([n, 3])
        assert _equal(f(x, shape), compiled(x, shape)), (m, n)
    assert compiles(compiled) <= 3
