"""Generated code for ATen graphs with symbolic sizes: one compile serves every allowed size.

The graphs are built by hand in the AOT stage's format (docs: dynamic shapes): placeholders' meta["val"]
are symbolic fakes, SymInt arguments are ``aten.sym_size.int`` / ``operator.*`` nodes, and
``gm.meta["kiln_shape_env"]`` is the ShapeEnv. Each test compiles once and runs sizes 8, 5, 13, 33
against the same ATen graph run eagerly (``fx.Interpreter`` on real tensors)."""
from __future__ import annotations

import operator

import pytest
import torch
import torch.fx as fx
from torch.utils._pytree import tree_map

from kiln.backends.kiln import compile_graph
from kiln.debug.stats import stats
from kiln.fake.symbolic import ShapeEnv, symbolic_fake
from kiln.options import Options

aten = torch.ops.aten
SIZES = (8, 5, 13, 33)


class GraphBuilder:
    """A small ATen graph with symbolic input sizes; nodes get meta["val"] from running on the fakes."""

    def __init__(self):
        self.graph = fx.Graph()
        self.env = ShapeEnv()
        self.makers = []  # per input: size -> real tensor

    def input(self, make, dims=(0,), dtype=torch.float32):
        """``make(n)`` builds the real input for size ``n``; its dims ``dims`` become symbolic."""
        i = len(self.makers)
        self.makers.append(lambda n: make(n).to(dtype))
        node = self.graph.placeholder(f"arg{i}")
        real = make(SIZES[0]).to(dtype)
        node.meta["val"] = symbolic_fake(real, self.env, f"L['x{i}']", set(dims)) if dims else None
        if node.meta["val"] is None:  # a static input
            from kiln.fake.tensor import FakeTensor

            node.meta["val"] = FakeTensor(torch.empty_like(real, device="meta"), real.device)
        return node

    def size(self, x, d):
        return self.op(aten.sym_size.int, x, d)

    def op(self, target, *args, **kwargs):
        vals, kvals = tree_map(lambda a: a.meta["val"] if isinstance(a, fx.Node) else a, (args, kwargs))
        node = self.graph.call_function(target, args, kwargs)
        node.meta["val"] = target(*vals, **kvals)
        return node

    def module(self, *outputs):
        self.graph.output(tuple(outputs))
        gm = fx.GraphModule(torch.nn.Module(), self.graph)
        gm.meta["kiln_shape_env"] = self.env
        return gm


def run_sizes(b: GraphBuilder, gm, target="cpp", sizes=SIZES, **options):
    """Compile ``gm`` once; every size gives eager's result. Returns the CompiledGraph."""
    eager = fx.GraphModule(gm, gm.graph)  # a copy to run eagerly (lowering may rewrite gm)
    opts = Options(cpu_codegen="triton" if target != "cpp" else "cpp", **options)
    cg = compile_graph(gm, opts, target)
    assert cg.dynamic, cg.dynamic_note
    call = cg.wrapper.compile()
    for n in sizes:
        torch.manual_seed(n)
        inputs = [make(n) for make in b.makers]
        expected = fx.Interpreter(eager).run(*[t.clone() for t in inputs])
        got = call(*[t.clone() for t in inputs])
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.stride() == e.stride(), (n, g.shape, e.shape, g.stride(), e.stride())
            torch.testing.assert_close(g, e, msg=lambda m: f"size {n}: {m}\n{cg.wrapper.source}")
    return cg


def test_pointwise_add_mul_exp():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 16))
    y = b.input(lambda n: torch.randn(n, 16))
    a = b.op(aten.add.Tensor, x, y)
    m = b.op(aten.mul.Tensor, a, 2.0)
    e = b.op(aten.exp.default, m)
    cg = run_sizes(b, b.module(e, a))
    assert "s0" in cg.wrapper.source and "arg0.size(0)" in cg.wrapper.source


def test_sum_and_amax_over_dims():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 24))
    rows = b.op(aten.sum.dim_IntList, x, [1])  # static reduction, symbolic outer
    cols = b.op(aten.sum.dim_IntList, x, [0])  # symbolic reduction
    mx = b.op(aten.amax.default, x, [0], True)
    total = b.op(aten.sum.default, x)  # everything
    run_sizes(b, b.module(rows, cols, mx, total))


def test_symbolic_last_dim_reduction():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(6, n), dims=(1,))
    s = b.op(aten.sum.dim_IntList, x, [1], True)
    y = b.op(aten.sub.Tensor, x, s)
    run_sizes(b, b.module(y))


def test_softmax_pattern():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 4, n), dims=(0, 2))
    mx = b.op(aten.amax.default, x, [-1], True)
    sub = b.op(aten.sub.Tensor, x, mx)
    ex = b.op(aten.exp.default, sub)
    s = b.op(aten.sum.dim_IntList, ex, [-1], True)
    out = b.op(aten.div.Tensor, ex, s)
    run_sizes(b, b.module(out))


def test_view_reshape_permute_with_symbolic_sizes():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 4, 6))
    n = b.size(x, 0)
    n4 = b.op(operator.mul, n, 4)
    flat = b.op(aten.view.default, x, [n4, 6])
    e = b.op(aten.exp.default, flat)  # lazy, then viewed back
    back = b.op(aten.view.default, e, [n, 24])
    p = b.op(aten.permute.default, x, [2, 0, 1])
    pc = b.op(aten.mul.Tensor, p, 3.0)
    t = b.op(aten.permute.default, b.op(aten.add.Tensor, x, 1.0), [1, 0, 2])
    tv = b.op(aten.clone.default, t, memory_format=torch.contiguous_format)
    keep = b.op(aten.add.Tensor, b.op(aten.permute.default, x, [2, 0, 1]), 1.0)  # a permuted dense layout
    run_sizes(b, b.module(back, pc, tv, keep))


def _matmul_graph():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 16))
    w = b.input(lambda n: torch.randn(16, 8), dims=())  # static weight
    bias = b.input(lambda n: torch.randn(n, 8))
    r = b.op(aten.relu.default, x)
    gram = b.op(aten.mm.default, r, b.op(aten.permute.default, r, [1, 0]))  # [n, n]
    am = b.op(aten.addmm.default, bias, x, w)
    n = b.size(x, 0)
    flat = b.op(aten.view.default, b.op(aten.add.Tensor, am, 1.0), [b.op(operator.mul, n, 8)])
    return b, b.module(b.op(aten.mul.Tensor, gram, 0.5), flat)


def test_mm_addmm_externs_take_sizes_from_symbols():
    b, gm = _matmul_graph()
    cg = run_sizes(b, gm)
    assert "extern" in cg.lg.format()


def test_index_ops():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 10))
    idx = b.input(lambda n: torch.arange(n) % 7, dtype=torch.int64)
    g = b.op(aten.index.Tensor, x, [idx])
    c = b.op(aten.cat.default, [x, g], 1)
    sl = b.op(aten.slice.Tensor, x, 0, 1, 9223372036854775807)
    run_sizes(b, b.module(c, b.op(aten.mul.Tensor, sl, 2.0)))


triton_interpreted = pytest.mark.skipif(
    __import__("kiln.codegen.triton.runtime", fromlist=["x"]).triton_available() is not None,
    reason="needs triton")


@triton_interpreted
def test_triton_pointwise_and_reductions(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 24))
    y = b.input(lambda n: torch.randn(n, 24))
    a = b.op(aten.exp.default, b.op(aten.add.Tensor, x, y))
    rows = b.op(aten.sum.dim_IntList, a, [1])
    cols = b.op(aten.amax.default, x, [0])
    cg = run_sizes(b, b.module(a, rows, cols), target="triton-interpreted")
    assert all(k.size_args for k in cg.kernels.values()), cg.source


@triton_interpreted
def test_triton_size_generic_kernels_pick_block_sizes_per_size_bucket(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(3, n), dims=(1,))
    total = b.op(aten.sum.dim_IntList, b.op(aten.exp.default, x), [-1])
    cg = run_sizes(b, b.module(total), target="triton-interpreted", sizes=(5, 7, 40, 300))
    (launcher,) = [k.fn for k in cg.kernels.values()]
    # rows of 5 and 7 share the 8 bucket; 40 and 300 get buckets (and RBLOCKs) of their own
    assert sorted(key[1] for key in launcher.buckets) == [8, 64, 512], launcher.buckets
    assert {key: b.config.RBLOCK for key, b in launcher.buckets.items()}[(4, 8, 1, False)] == 8
    assert launcher.kernel.source.count("do_not_specialize") == 1


@triton_interpreted
@pytest.mark.parametrize("symbolic_x", [False, True])
def test_triton_transpose_with_symbolic_sizes_is_tiled(monkeypatch, symbolic_x):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b = GraphBuilder()
    # (sizes 24, 21, 29, 49: ragged tiles) the symbolic loop is the write's (the tile's x: the result's
    # last dim) or the read's (the tile's y)
    shape = (lambda n: (2, n + 16, 40)) if symbolic_x else (lambda n: (2, 40, n + 16))
    x = b.input(lambda n: torch.randn(*shape(n)), dims=(1,) if symbolic_x else (2,))
    t = b.op(aten.permute.default, x, [0, 2, 1])
    out = b.op(aten.mul.Tensor, b.op(aten.clone.default, t, memory_format=torch.contiguous_format), 2.0)
    cg = run_sizes(b, b.module(out), target="triton-interpreted", triton_max_block=16)
    (k,) = cg.kernels.values()
    assert k.style == "tiled" and k.size_args, cg.source
    from kiln.loopir.sizes import is_symbolic

    assert is_symbolic(k.ynumel_expr) == (not symbolic_x)
    buckets = {key[0] if symbolic_x else key[2] for key in k.fn.buckets}
    assert len(buckets) >= 2, k.fn.buckets  # a bucket (and grid) per size


@triton_interpreted
def test_triton_softmax_symbolic_rows(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b, out = _softmax_over_symbolic_rows()
    run_sizes(b, b.module(out), target="triton-interpreted", triton_max_block=4)


def _softmax_over_symbolic_rows():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(3, n), dims=(1,))
    mx = b.op(aten.amax.default, x, [-1], True)
    ex = b.op(aten.exp.default, b.op(aten.sub.Tensor, x, mx))
    return b, b.op(aten.div.Tensor, ex, b.op(aten.sum.dim_IntList, ex, [-1], True))


@triton_interpreted
def test_triton_matmul_with_templates_option_keeps_library_call(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b, gm = _matmul_graph()
    cg = run_sizes(b, gm, target="triton-interpreted", matmul_templates=True)
    assert not any(getattr(k, "style", "") == "matmul" for k in cg.kernels.values())


def test_failure_falls_back_to_static_with_guards(monkeypatch):
    import kiln.codegen.cpp.kernel as backend  # (the backend imports it when it compiles)
    from kiln.loopir import sizes

    real = backend.generate_kernel

    def failing(*args, **kwargs):
        if sizes.dynamic():
            raise sizes.DynamicUnsupported("test: no size-generic kernel")
        return real(*args, **kwargs)

    monkeypatch.setattr(backend, "generate_kernel", failing)
    monkeypatch.delenv("KILN_DYNAMIC_STRICT", raising=False)
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 16))
    gm = b.module(b.op(aten.exp.default, x))
    before = sum(stats.dynamic_fallbacks.values())
    cg = compile_graph(gm, Options(), "cpp")
    assert not cg.dynamic and "test: no size-generic kernel" in cg.explain()
    assert sum(stats.dynamic_fallbacks.values()) == before + 1
    check = b.env.check_function()
    assert check(torch.randn(8, 16)) is None and check(torch.randn(5, 16)) is not None
    out = cg.wrapper.compile()(torch.ones(8, 16))[0]
    torch.testing.assert_close(out, torch.ones(8, 16).exp())


def test_sizes_helpers_guard_through_the_env():
    import sympy

    from kiln.loopir import sizes

    env = ShapeEnv()
    s0 = env.create_symbol(8, "L['x'].size(0)")
    with sizes.size_context(env):
        assert sizes.divides(16, 32 * s0) and not sizes.divides(16, 8 * s0)
        assert sizes.known(sympy.Gt(s0, 1)) is True and not env.guards  # decided for every size
        assert sizes.gt(s0, 4) and len(env.guards) == 1  # depends on the size: guarded at the hint
        assert sizes.broadcast_shapes((s0, 1), (1, 3)) == (s0, 3)
        assert sizes.size(torch.SymInt(__import__("kiln.fake.symbolic", fromlist=["x"]).SymNode(s0 * 2, env, int, 16))) == 2 * s0
    with sizes.size_context(env, concrete=True):
        assert sizes.size(2 * s0) == 16


def test_index_printer_parenthesizes_symbolic_divisors():
    """``x // (16*s1)``: a product divisor printed bare (``x / 16*s1``) divides by 16 and multiplies by s1
    (a GPT-2 attention view with symbolic sizes read out of bounds that way)."""
    import sympy

    from kiln.codegen.common import _print, print_index_py
    from kiln.loopir.index import FloorDiv, ModularIndexing

    x, s = sympy.symbols("x s1", integer=True, nonnegative=True)
    assert _print(FloorDiv(x, 16 * s), "/") == "(x / (16*s1))"
    assert _print(ModularIndexing(x, 16 * s, 4 * s), "/") == "((x / (16*s1)) % (4*s1))"
    expr = FloorDiv(x, 16 * s) + ModularIndexing(x, 1, 4 * s)
    for xv, sv in [(100, 3), (1000, 7), (5, 2)]:
        assert eval(print_index_py(expr), {"x": xv, "s1": sv}) == xv // (16 * sv) + xv % (4 * sv)


def test_divisor_products_whose_first_factor_is_parenthesized():
    """``x / ((s2 / 2)*s1)``, not ``x / (s2 / 2)*s1``: a product printed as "(s2 // 2)*s1" starts with a
    parenthesis without being enclosed by one (max_pool2d's backward with symbolic sizes scattered every
    channel into the first this way). Printed C and Python expressions are evaluated against sympy's."""
    import itertools

    import sympy

    from kiln.codegen.common import print_index_c, print_index_py
    from kiln.loopir.index import FloorDiv, ModularIndexing
    from tests.loopir.test_index_simplify import _eval

    x, s1, s2 = sympy.symbols("x s1 s2", integer=True, positive=True)
    divisors = [FloorDiv(s2, 2) * s1, (s1 + 1) * s2, sympy.Min(s1 + 1, s2) * FloorDiv(s2, 2), (s1 + 2) * (s2 + 1)]
    for d in divisors:
        for expr in (FloorDiv(x, d), ModularIndexing(x, d, s1), ModularIndexing(x, 1, d), FloorDiv(x, d) * d):
            for xv, v1, v2 in itertools.product((0, 7, 100, 12345), (2, 3, 5), (2, 4, 9)):
                env = {"x": xv, "s1": v1, "s2": v2}
                want = _eval(expr, {x: xv, s1: v1, s2: v2})
                assert eval(print_index_py(expr), {"min": min, "max": max}, env) == want, (expr, env)
                c = print_index_c(expr).replace("std::min<int64_t>", "min").replace("/", "//")
                assert eval(c, {"min": min, "max": max}, env) == want, (expr, env)


def test_a_rational_coefficient_is_refused_not_truncated():
    """Index arithmetic is integral: ``x*(x + 1)/2`` printed as ``0*x*(x + 1)`` would index wrongly."""
    import pytest
    import sympy

    from kiln.codegen.common import print_index_c

    x = sympy.Symbol("x", integer=True, nonnegative=True)
    with pytest.raises(NotImplementedError, match="not an integer"):
        print_index_c(x * (x + 1) / 2)
    assert print_index_c(-3 * x + 2) == "(-3*x + 2)"


def test_size_operands_are_parenthesized_in_triton_and_cpp():
    """Loop-variable definitions (``x0 = xindex // (16*s0)``) and C++ strides use sizes as operands."""
    import sympy

    from kiln.codegen.cpp.loops import csize
    from kiln.codegen.triton.kernel import index_var_defs

    s0 = sympy.Symbol("s0", integer=True, positive=True)
    defs = index_var_defs(["x0", "x1", "x2"], [4, s0, 16], "xindex")
    assert defs[0] == "x0 = (xindex // (16*s0))"
    for xindex in (0, 17, 16 * 5 * 3 + 7):  # the definitions decompose a flat index over [4, s0, 16]
        ns = {"xindex": xindex, "s0": 5}
        for line in defs:
            exec(line, ns)
        assert ns["x0"] * 5 * 16 + ns["x1"] * 16 + ns["x2"] == xindex
    assert csize(16 * s0) == "(16*s0)" and csize(s0) == "s0" and csize(8) == "8"


def test_arange_with_symbolic_start_and_slice_scatter_at_symbolic_offsets():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(2 * n, 3))
    src = b.input(lambda n: torch.randn(n, 3))
    n = b.size(src, 0)
    n2 = b.op(operator.mul, n, 2)
    from kiln.fake.mode import FakeTensorMode

    with FakeTensorMode():  # arange makes a fake (its sizes stay symbolic)
        pos = b.op(aten.arange.start_step, n, n2, 1, dtype=torch.int64)  # position ids after a past of n
        posf = b.op(aten.arange.start_step, n, n2, 1, dtype=torch.float32)
    upper = b.op(aten.slice_scatter.default, x, src, 0, n, n2)  # x[n:] = src
    lower = b.op(aten.slice_scatter.default, x, src, 0, 0, n)  # x[:n] = src
    run_sizes(b, b.module(pos, posf, upper, lower))
    # x's rows (s0) and src's (s1) are separate symbols: only s1 <= s0 is guarded, no size is pinned
    assert [str(g.fact) for g in b.env.guards] == ["s0 >= s1"]


def test_constant_pad_by_a_symbolic_amount():
    # F.pad(x, (1, (-n) % 4)): a pad that is a size expression (it was int(pad): a static fallback)
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(2, n), dims=(1,))
    n = b.size(x, 1)
    neg = b.op(operator.neg, n)
    pad = b.op(operator.mod, neg, 4)
    y = b.op(aten.constant_pad_nd.default, x, [1, pad], 0.5)
    run_sizes(b, b.module(y), sizes=(8, 5, 13, 34))
    assert b.env.guards == []




def test_comparison_with_a_size_expression_operand_promotes_as_a_python_number():
    # arange(n) >= n // 2 and x < n // 2 (reflect pad's and tril(diagonal=-(n // 2))'s masks): the scalar
    # operand is a sympy expression, which promotes as a Python int (it went to torch.result_type: a
    # TypeError, and every size compiled apart)
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 3) * n)
    n = b.size(x, 0)
    half = b.op(operator.floordiv, n, 2)
    from kiln.fake.mode import FakeTensorMode

    with FakeTensorMode():
        idx = b.op(aten.arange.start_step, 0, n, 1, dtype=torch.int64)
    upper = b.op(aten.ge.Scalar, idx, half)  # compared as int64
    below = b.op(aten.lt.Scalar, x, half)  # compared as float32
    run_sizes(b, b.module(upper, below))



def test_select_scatter_at_a_symbolic_index():
    # cache[:, pos] = new with pos a size expression: the scatter compares with the index expression
    # (it made a C++ literal of it: a TypeError, and every position compiled apart)
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(2, n, 4), dims=(1,))
    src = b.input(lambda n: torch.randn(2, 4), dims=())
    n = b.size(x, 1)
    at = b.op(operator.sub, n, 2)
    run_sizes(b, b.module(b.op(aten.select_scatter.default, x, src, 1, at)))

def test_select_at_a_negative_index_of_a_symbolic_dim():
    # x[:, -1] over a symbolic dim selects s0 - 1: the index mapping takes the size expression (it made
    # sympy.Integer(s0 - 1), a TypeError, and every size compiled apart: greedy decoding's logits[:, -1])
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(3, n, 4), dims=(1,))
    last = b.op(aten.select.int, b.op(aten.mul.Tensor, x, 2.0), 1, -1)
    cg = run_sizes(b, b.module(b.op(aten.argmax.default, last, -1)))  # asserts one size-generic compile
    assert "4*s0 - 4" in cg.lg.format()  # the load of row s0 - 1

@triton_interpreted
def test_triton_reduction_over_a_symbolic_row_is_persistent_under_a_shape_guard(monkeypatch):
    """A row that fits ``triton_persistent_max`` at the hint: the persistent style (one block per row,
    no loop), kept sound by the guard ``s0 <= persistent_max`` in the graph's ShapeEnv."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b, out = _softmax_over_symbolic_rows()
    cg = run_sizes(b, b.module(out), target="triton-interpreted", sizes=(8, 5, 13, 16), triton_persistent_max=16)
    styles = {k.style for k in cg.kernels.values()}
    assert styles == {"persistent"}, cg.source
    assert [str(g.fact) for g in b.env.guards] == ["s0 <= 16"], b.env.guards
    assert "for roffset" not in cg.source


@triton_interpreted
def test_triton_reduction_whose_hint_is_over_the_limit_is_looped_without_guard(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(3, n + 20), dims=(1,))
    total = b.op(aten.sum.dim_IntList, b.op(aten.exp.default, x), [-1])
    cg = run_sizes(b, b.module(total), target="triton-interpreted", sizes=(8, 5, 13, 60), triton_persistent_max=16)
    assert {k.style for k in cg.kernels.values()} == {"looped"}, cg.source
    assert b.env.guards == []


def test_persistent_fits_decides_statically_where_it_can():
    from kiln.codegen.triton.persistent import persistent_fits
    from kiln.loopir.sizes import size_context

    env = ShapeEnv()
    x = symbolic_fake(torch.randn(8, 6), env, "L['x']", {0, 1})
    with size_context(env):
        s0, s1 = (s.node.expr for s in x.shape)
        assert persistent_fits([12, 16], 16) and not persistent_fits([17], 16)
        assert not persistent_fits([s0, s1], 4096)  # neither is the longest for every size: looped
        assert env.guards == []
        assert persistent_fits([2 * s0, s0], 4096)  # 2*s0 >= s0 always: guarded on 2*s0 only
        assert [str(g.fact) for g in env.guards] == ["2*s0 <= 4096"]
        assert not persistent_fits([s1 * 1000], 4096)  # hint 6000: looped, no guard
        assert len(env.guards) == 1


@triton_interpreted
def test_triton_copy_of_a_padded_matrix_merges_its_loops(monkeypatch):
    """A copy out of a row-padded (n*m, 13 -> 16) matrix into (n, m, 13): the n and m loops form one
    flat row number (``x0_1``), so the kernel divides by no runtime size to find an element."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 6, 16), dims=(0,))
    narrowed = b.op(aten.slice.Tensor, x, 2, 0, 13)
    out = b.op(aten.clone.default, narrowed, memory_format=torch.contiguous_format)
    cg = run_sizes(b, b.module(out), target="triton-interpreted")
    (kernel,) = cg.kernels.values()
    assert "x0_1 = (xindex // 13)" in kernel.source, kernel.source
    assert "16*x0_1" in kernel.source and "out_ptr0 + (xindex)" in kernel.source, kernel.source


@triton_interpreted
def test_triton_size_generic_kernels_choose_64_bit_indices_per_call(monkeypatch):
    """32-bit index arithmetic unless the sizes of a call let an index reach 2**31 (INDEX64)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 1000), dims=(0,))
    cg = run_sizes(b, b.module(b.op(aten.exp.default, x)), target="triton-interpreted")
    (kernel,) = cg.kernels.values()
    assert "INDEX64: tl.constexpr" in kernel.source and "if INDEX64:" in kernel.source
    launcher = kernel.fn
    assert {key[3] for key in launcher.buckets} == {False}
    assert not launcher.wide((2_000_000,)) and launcher.wide((2_200_000,))  # 2.2e9 elements
