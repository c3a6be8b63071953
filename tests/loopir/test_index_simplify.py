"""simplify_with_ranges: view index arithmetic folds away where the loop extents allow, and the
result equals the original expression at every point of the iteration space."""
import itertools

import sympy

from kiln.loopir.index import FloorDiv, ModularIndexing, simplify_with_ranges, vars_for

x0, x1, x2 = vars_for("x", 3)


def same_everywhere(a, b, ranges):
    syms = list(ranges)
    for point in itertools.product(*(range(ranges[s]) for s in syms)):
        env = dict(zip(syms, point))
        assert _eval(a, env) == _eval(b, env), (a, b, env)


def _eval(e, env):
    """An index expression's value by its definition (FloorDiv, ModularIndexing over non-negative ints)."""
    if e.is_Integer:
        return int(e)
    if e.is_Symbol:
        return env[e]
    args = [_eval(a, env) for a in e.args]
    if isinstance(e, sympy.Add):
        return sum(args)
    if isinstance(e, sympy.Mul):
        out = 1
        for a in args:
            out *= a
        return out
    if isinstance(e, sympy.Pow):
        return args[0] ** args[1]
    if isinstance(e, FloorDiv):
        return args[0] // args[1]
    if isinstance(e, ModularIndexing):
        return (args[0] // args[1]) % args[2]
    if isinstance(e, (sympy.Min, sympy.Max)):
        return (min if isinstance(e, sympy.Min) else max)(args)
    raise NotImplementedError(e)


def test_small_terms_drop_out_of_a_floor_division():
    ranges = {x0: 32, x1: 32}
    e = FloorDiv(32 * x0 + x1, 512)
    s = simplify_with_ranges(e, ranges)
    assert s == FloorDiv(x0, 16)
    same_everywhere(e, s, ranges)


def test_reshape_round_trip_reads_as_one_dim():
    ranges = {x0: 32, x1: 128}
    e = 128 * ModularIndexing(x0, 1, 16) + 2048 * FloorDiv(x0, 16) + x1
    s = simplify_with_ranges(e, ranges)
    assert s == 128 * x0 + x1
    same_everywhere(e, s, ranges)


def test_split_dims_fold_views_of_the_joined_dim():
    ranges = {x0: 2, x1: 16, x2: 32}
    flat = 512 * x0 + 32 * x1 + x2
    e = 512 * FloorDiv(flat, 512) + ModularIndexing(flat, 1, 32) + 32 * ModularIndexing(flat, 32, 16)
    s = simplify_with_ranges(e, ranges)
    assert s == flat
    same_everywhere(e, s, ranges)


def test_what_cannot_fold_stays_exact():
    ranges = {x0: 6, x1: 5}
    for e in (FloorDiv(5 * x0 + x1, 3), ModularIndexing(5 * x0 + x1, 2, 4), 3 * FloorDiv(x0, 3) + ModularIndexing(x0, 1, 2)):
        same_everywhere(e, simplify_with_ranges(e, ranges), ranges)


def test_in_range_lends_its_range_and_leaves_no_trace():
    from kiln.loopir.index import InRange

    x0, x1 = vars_for("x", 2)
    ranges = {x0: 256, x1: 1004}  # a pad's loop: one column more than its input's 1003
    flat = 1003 * x0 + InRange(x1, 1003)  # the input read through a view of its flat index
    assert simplify_with_ranges(FloorDiv(flat, 1003), ranges) == x0
    assert simplify_with_ranges(ModularIndexing(flat, 1, 1003), ranges) == x1
    assert simplify_with_ranges(flat, ranges) == 1003 * x0 + x1
    # without it the loop's extent allows no folding
    assert simplify_with_ranges(FloorDiv(1003 * x0 + x1, 1003), ranges) != x0
    # a left pad: the read index is shifted
    assert simplify_with_ranges(FloorDiv(1003 * x0 + InRange(x1 - 2, 1003), 1003), {x0: 256, x1: 1007}) == x0
    assert InRange(sympy.Integer(5), sympy.Integer(10)) == 5


def test_in_range_prints_and_evaluates_as_its_argument():
    from kiln.codegen.common import print_index_py
    from kiln.loopir.handlers import eval_index
    from kiln.loopir.index import InRange

    x1 = vars_for("x", 2)[1]
    assert print_index_py(2 * InRange(x1, 7) + 1) == print_index_py(2 * x1 + 1)
    assert eval_index(InRange(x1, 7) + 1, {x1: 9}) == 10  # (outside its range too: a masked-off lane)
