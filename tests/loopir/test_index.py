"""Index expressions: FloorDiv / ModularIndexing evaluation and simplification with variable ranges."""
import sympy

from kiln.loopir.index import FloorDiv, ModularIndexing, expr_range, linear_index, simplify_with_ranges, var

x0, x1, x2 = var("x", 0), var("x", 1), var("x", 2)


def test_constant_folding():
    assert FloorDiv(sympy.Integer(7), sympy.Integer(2)) == 3
    assert FloorDiv(x0, 1) == x0
    assert ModularIndexing(sympy.Integer(17), sympy.Integer(4), sympy.Integer(3)) == 1  # (17 // 4) % 3
    assert ModularIndexing(x0, 4, 1) == 0


def test_range_of_affine_expressions():
    assert expr_range(3 * x0 + x1 - 2, {x0: 4, x1: 3}) == (-2, 9)
    assert expr_range(-x0, {x0: 5}) == (-4, 0)
    assert expr_range(FloorDiv(x0, 4), {x0: 10}) == (0, 2)
    assert expr_range(x0 * x1, {x0: 2, x1: 2}) is None  # not affine


def test_reshape_indices_simplify_away():
    # a [4, 6] value viewed as [24] and back: the flat index 6*x0 + x1 splits into x0 and x1 exactly
    flat = 6 * x0 + x1
    ranges = {x0: 4, x1: 6}
    assert simplify_with_ranges(FloorDiv(flat, 6), ranges) == x0
    assert simplify_with_ranges(ModularIndexing(flat, 1, 6), ranges) == x1
    assert simplify_with_ranges(ModularIndexing(flat, 2, 3), ranges) == FloorDiv(x1, 2)


def test_what_cannot_simplify_stays():
    ranges = {x0: 8}
    e = FloorDiv(x0, 3)
    assert simplify_with_ranges(e, ranges) == e
    m = ModularIndexing(x0, 1, 3)
    assert simplify_with_ranges(m, ranges) == m
    # a term whose range is unknown (not affine) is never dropped
    assert simplify_with_ranges(FloorDiv(x0 * x1, 4), {x0: 2, x1: 2}) == FloorDiv(x0 * x1, 4)


def test_linear_index_skips_zero_strides():
    assert linear_index([x0, x1, x2], [12, 0, 1], 5) == 12 * x0 + x2 + 5


def test_linear_index_with_a_size_expression_offset():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    offset = 3 * FloorDiv(s0, 2)  # x[s0 // 2:] of an [s0, 3] tensor
    assert linear_index([x0, x1], [3, 1], offset) == 3 * x0 + x1 + offset


def test_simplification_agrees_with_evaluation():
    import itertools

    ranges = {x0: 3, x1: 10}
    exprs = [FloorDiv(10 * x0 + x1, 5), ModularIndexing(10 * x0 + x1, 5, 2), ModularIndexing(20 * x0 + 2 * x1, 4, 5),
             FloorDiv(7 * x0 + x1, 7)]
    for e in exprs:
        s = simplify_with_ranges(e, ranges)
        for a, b in itertools.product(range(3), range(10)):
            assert int(e.subs({x0: a, x1: b})) == int(s.subs({x0: a, x1: b})), (e, s, a, b)
