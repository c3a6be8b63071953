"""simplify_with_ranges with size symbols (index_symbolic): view index arithmetic of symbolic sizes folds
as it does for static sizes, only where it holds for every size, and the result equals the original
expression at every point for several concrete sizes."""
import itertools

import sympy

from kiln.loopir.index import FloorDiv, ModularIndexing, simplify_with_ranges, vars_for
from kiln.loopir.index_symbolic import bounds, provably_nonneg

from .test_index_simplify import _eval

x0, x1, x2 = vars_for("x", 3)
s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)


def same_for_sizes(a, b, ranges, sizes=((2, 2), (3, 5), (1, 7), (4, 3))):
    for v0, v1 in sizes:
        sz = {s0: v0, s1: v1}
        extents = {v: _eval(sympy.sympify(n), sz) for v, n in ranges.items()}
        for point in itertools.product(*(range(extents[v]) for v in ranges)):
            env = {**sz, **dict(zip(ranges, point))}
            assert _eval(a, env) == _eval(b, env), (a, b, env)


def test_bert_head_split_folds_to_the_static_form():
    # q.view(b, t, 4, 32).permute(0, 2, 1, 3) read in a loop over [4*s0, s1, 32] (flat index f)
    ranges = {x0: 4 * s0, x1: s1, x2: 32}
    f = 32 * x0 * s1 + 32 * x1 + x2
    e = 128 * ModularIndexing(f, 32, s1) + 128 * s1 * FloorDiv(f, 128 * s1) + 32 * ModularIndexing(f, 32 * s1, 4) + x2
    got = simplify_with_ranges(e, ranges)
    assert got == 128 * s1 * FloorDiv(x0, 4) + 128 * x1 + x2 + 32 * ModularIndexing(x0, 1, 4)
    same_for_sizes(got, e, ranges)


def test_split_and_joined_dims_recombine_with_symbolic_place_values():
    ranges = {x0: s0 * s1, x1: 8}
    f = 8 * x0 + x1
    e = 8 * ModularIndexing(f, 8, s1) + 8 * s1 * FloorDiv(f, 8 * s1) + x1
    got = simplify_with_ranges(e, ranges)
    assert got == 8 * x0 + x1
    same_for_sizes(got, e, ranges)


def test_symbolic_divisors_fold_rows_of_a_square():
    ranges = {x0: 4 * s0, x1: s1, x2: s1}
    g = x0 * s1**2 + x1 * s1 + x2
    e = ModularIndexing(g, s1, s1) + 4 * s1 * FloorDiv(g, 4 * s1**2) + s1 * ModularIndexing(g, s1**2, 4)
    got = simplify_with_ranges(e, ranges)
    assert got == s1 * x0 + x1
    same_for_sizes(got, e, ranges)


def test_what_does_not_hold_for_every_size_stays():
    # x1 < s1 + 1 may reach s1: the digit is not x1 for every size
    ranges = {x0: s0, x1: s1 + 1}
    e = ModularIndexing(x0 * s1 + x1, 1, s1)
    got = simplify_with_ranges(e, ranges)
    assert got.has(ModularIndexing)
    same_for_sizes(got, e, ranges)
    # 33 columns do not fit the place value 32
    e = FloorDiv(32 * x0 * s1 + x1, 32)
    got = simplify_with_ranges(e, {x0: s0, x1: 33})
    assert got.has(FloorDiv)
    same_for_sizes(got, e, {x0: s0, x1: 33})


def test_proofs_and_bounds():
    assert provably_nonneg(32 * s1 - 1)  # sizes are >= 1
    assert not provably_nonneg(s1 - 2)  # holds only from 2 on: not assumed here
    assert not provably_nonneg(s0 - s1)
    assert bounds(32 * x1 + x2, {x1: s1, x2: 32}) == (0, 32 * s1 - 1)
    assert bounds(x0 * x1, {x0: s0, x1: s1}) is None  # not affine
