"""Dynamic shapes through AOT: graphs traced with symbolic sizes (SymInt arguments as FX nodes), and
aot_eager running one compile on many sizes, for inference and training."""
import operator

import pytest
import sympy
import torch
import torch.nn as nn
import torch.nn.functional as F

from kiln.aot.compile import aot_compile
from kiln.aot.symbols import SizeNodes, is_fully_specialized, is_size_node
from kiln.aot.trace import aot_trace
from kiln.backends.aot_eager import compile_aot_eager, run_graph_module
from kiln.debug.stats import stats
from kiln.decomp import decomposition_table
from kiln.fake.shapes import to_expr
from tests.aot.dynamic_helpers import check_guards, check_sizes, dynamic_gm

aten = torch.ops.aten
SIZES = (8, 5, 13, 32)


def _sym_nodes(gm):
    return [n for n in gm.graph.nodes if is_size_node(n)]


# ---- unit: the graph format ------------------------------------------------------------------------

def test_size_arguments_are_nodes():
    def f(x):
        return (x.view(x.size(0) * 4, -1) * 2).sum(0)

    gm = dynamic_gm(f, [torch.randn(8, 16)], [{0}])
    ag = aot_trace(gm, [torch.randn(8, 16)], decompositions=decomposition_table())
    (x,) = [n for n in ag.gm.graph.nodes if n.op == "placeholder"]
    s0 = to_expr(x.meta["val"].shape[0])
    assert isinstance(s0, sympy.Symbol) and x.meta["val"].shape[1] == 16
    sizes = _sym_nodes(ag.gm)
    assert [n.target for n in sizes] == [aten.sym_size.int, operator.mul]
    assert sizes[0].args == (x, 0) and to_expr(sizes[0].meta["val"]) == s0
    assert to_expr(sizes[1].meta["val"]) == 4 * s0
    view = next(n for n in ag.gm.graph.nodes if n.target is aten.view.default)
    assert view.args[1] == [sizes[1], -1]
    assert [to_expr(s) for s in view.meta["val"].shape] == [4 * s0, 4]
    for n in [8, 5, 13]:  # the ATen graph runs as plain FX on other sizes
        y = torch.randn(n, 16)
        torch.testing.assert_close(ag.gm(y)[0], f(y))


def test_size_nodes_cached_per_expression():
    def f(x):
        return x.view(x.size(0) * 2, -1) + 1, x.reshape(x.size(0) * 2, -1) * 2

    gm = dynamic_gm(f, [torch.randn(8, 6)], [{0}])
    ag = aot_trace(gm, [torch.randn(8, 6)], decompositions=decomposition_table())
    assert len([n for n in _sym_nodes(ag.gm) if n.target is aten.sym_size.int]) == 1
    assert len([n for n in _sym_nodes(ag.gm) if n.target is operator.mul]) == 1


def test_size_expression_forms():
    from kiln.fake.symbolic import ShapeEnv, symbolic_fake
    from kiln.loopir.index import FloorDiv, ModularIndexing
    import torch.fx as fx

    env = ShapeEnv()
    x = symbolic_fake(torch.randn(8, 6), env, "L['x']", {0, 1})
    graph = fx.Graph()
    p = graph.placeholder("x")
    sizes = SizeNodes(graph, env)
    sizes.bind(p, x)
    s0, s1 = (to_expr(n) for n in x.shape)
    exprs = [s0 * s1 - 3, 2 * s0 + s1, FloorDiv(s0, 2), ModularIndexing(s0, 1, s1), sympy.Max(s0, s1), s0 ** 2, -s0]
    for e in exprs:
        sizes.expr_node(e)
    graph.output(tuple(sizes.expr_node(e) for e in exprs))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    for a, b in [(8, 6), (5, 9), (13, 3)]:
        got = gm(torch.empty(a, b))
        want = [int(sympy.sympify(e).xreplace({s0: a, s1: b})) for e in exprs]
        assert list(got) == want, (a, b, got, want)


def test_broadcast_of_two_symbols_records_a_guard():
    def f(x, y):
        return x + y

    gm = dynamic_gm(f, [torch.randn(8, 4), torch.randn(6, 4)], [{0}, {0}])
    env = gm.meta["kiln_shape_env"]
    with pytest.raises(RuntimeError):  # eager raises too: 8 != 6 (the guard is the negation)
        aot_trace(gm, [torch.randn(8, 4), torch.randn(6, 4)], decompositions=decomposition_table())
    gm = dynamic_gm(f, [torch.randn(8, 4), torch.randn(8, 4)], [{0}, {0}])
    ag = aot_trace(gm, [torch.randn(8, 4), torch.randn(8, 4)], decompositions=decomposition_table())
    env = gm.meta["kiln_shape_env"]
    assert len(env.symbols) == 1  # duck sizing: equal sizes share a symbol, the inputs' check binds it
    assert check_guards(gm, [torch.randn(5, 4), torch.randn(5, 4)]) is None
    assert check_guards(gm, [torch.randn(5, 4), torch.randn(6, 4)]) is not None
    torch.testing.assert_close(ag.gm(torch.ones(5, 4), torch.ones(5, 4))[0], torch.full((5, 4), 2.0))


def test_specialized_env_traces_statically():
    def f(x):
        return x.view(x.size(0) * 4, -1) * 2

    gm = dynamic_gm(f, [torch.randn(8, 16)], [{0}])
    gm.meta["kiln_shape_env"].specialize_all()
    assert is_fully_specialized(gm.meta["kiln_shape_env"])
    ag = aot_trace(gm, [torch.randn(8, 16)], decompositions=decomposition_table())
    assert not _sym_nodes(ag.gm)
    x = next(n for n in ag.gm.graph.nodes if n.op == "placeholder")
    assert tuple(x.meta["val"].shape) == (8, 16)


def test_backward_binds_sizes_from_its_own_inputs():
    def f(x, w):
        return (x.view(x.size(0) * 2, -1) @ w).sum() + x.sum()

    x, w = torch.randn(8, 4, 6, requires_grad=True), torch.randn(12, 5, requires_grad=True)
    gm = dynamic_gm(f, [x, w], [{0}, ()])
    rt = aot_compile(gm, [x, w], run_graph_module, run_graph_module, decompositions=decomposition_table())
    part = rt.plan.partition
    for g in (part.fwd, part.bwd):
        placeholders = {n for n in g.graph.nodes if n.op == "placeholder"}
        for n in _sym_nodes(g):
            if n.target is aten.sym_size.int:
                assert n.args[0] in placeholders
        g.graph.lint()
    assert any(n.target is aten.sym_size.int for n in _sym_nodes(part.bwd))
    bwd_inputs = [n for n in part.bwd.graph.nodes if n.op == "placeholder"]
    assert any(any(to_expr(s).free_symbols for s in n.meta["val"].shape) for n in bwd_inputs)


def test_output_view_of_input_replays_symbolic_sizes():
    def f(x):
        return x.view(x.size(0) * 2, -1), x * 2

    x = torch.randn(8, 6)
    gm = dynamic_gm(f, [x], [{0}])
    fn = compile_aot_eager(gm, [x], fallback=False)
    for n in SIZES:
        y = torch.randn(n, 6)
        out = fn(y)
        assert out[0]._base is y and out[0].shape == (2 * n, 3)
        torch.testing.assert_close(out, f(y))


def test_failure_falls_back_to_static():
    def f(x):  # s0*s1 / (s0 + 1) is not a size kiln can infer symbolically
        return x.view(x.size(0) + 1, -1) + 1

    x = torch.randn(5, 6)
    stats.reset()
    gm = dynamic_gm(f, [x], [{0, 1}])
    fn = compile_aot_eager(gm, [x], fallback=False)
    assert is_fully_specialized(gm.meta["kiln_shape_env"])
    assert sum(stats.dynamic_fallbacks.values()) == 1 and stats.dynamic_graphs == 0
    assert "static sizes" in fn.kiln_explain()
    torch.testing.assert_close(fn(x), f(x))
    assert check_guards(gm, [torch.randn(3, 6)]) is not None  # another size: the guards fail (recompile)


def test_dynamic_compile_counts_and_explains():
    x = torch.randn(8, 6)
    stats.reset()
    gm = dynamic_gm(lambda x: x.softmax(-1), [x], [{0}])
    fn = compile_aot_eager(gm, [x], fallback=False)
    assert stats.dynamic_graphs == 1 and not stats.dynamic_fallbacks
    assert "symbolic sizes" in fn.kiln_explain() and "s0" in fn.kiln_explain()


def test_kiln_backend_compiles_dynamic_graphs_once():
    from kiln.backends.kiln import kiln_backend

    def f(x):
        return x.view(x.size(0) * 2, -1).relu() + 1

    x = torch.randn(8, 6)
    gm = dynamic_gm(f, [x], [{0}])
    fn = kiln_backend(gm, [x])
    assert not is_fully_specialized(gm.meta["kiln_shape_env"])
    for n in (8, 5, 13):
        y = torch.randn(n, 6)
        assert check_guards(gm, [y]) is None
        torch.testing.assert_close(fn(y), f(y))


# ---- end to end: one compile, many sizes, vs eager -------------------------------------------------

class Attention(nn.Module):
    def __init__(self, d=16, h=2):
        super().__init__()
        self.qkv, self.o, self.h = nn.Linear(d, 3 * d), nn.Linear(d, d), h

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        a = ((q @ k.transpose(-2, -1)) * (d // self.h) ** -0.5).softmax(-1)
        return self.o((a @ v).transpose(1, 2).reshape(b, t, d))


class CausalSDPA(nn.Module):
    def __init__(self, d=16, h=2):
        super().__init__()
        self.qkv, self.h = nn.Linear(d, 3 * d), h

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.bn(self.c(x))).mean((2, 3))


class EmbeddingLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.e, self.l = nn.Embedding(50, 16), nn.Linear(16, 50)

    def forward(self, idx, tgt):
        logits = self.l(self.e(idx))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))


def _randn(*shape):
    return torch.randn(*shape, requires_grad=True)


CASES = {
    "mlp": (None, lambda: nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)), lambda n: [_randn(n, 16)], [{0}]),
    "layer_norm": (None, lambda: nn.LayerNorm(16), lambda n: [_randn(n, 3, 16)], [{0}]),
    "softmax": (lambda x: x.softmax(-1) * x.log_softmax(0), None, lambda n: [_randn(n, 7)], [{0}]),
    "attention": (None, Attention, lambda n: [_randn(2, n, 16)], [{1}]),
    "attention_batch_and_seq": (None, Attention, lambda n: [_randn(n, n + 1, 16)], [{0, 1}]),
    "sdpa_causal": (None, CausalSDPA, lambda n: [_randn(2, n, 16)], [{1}]),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), None,
                      lambda n: [_randn(n, 10), torch.randint(0, 10, (n,))], [{0}, {0}]),
    "embedding_cross_entropy": (None, EmbeddingLM, lambda n: [torch.randint(0, 50, (2, n)), torch.randint(0, 50, (2, n))],
                                [{1}, {1}]),
    "conv_bn_batch": (None, ConvBN, lambda n: [_randn(n, 3, 10, 10)], [{0}]),
    "conv_bn_spatial": (None, ConvBN, lambda n: [_randn(2, 3, n, n + 2)], [{2, 3}]),
    "cat_pad_cumsum": (lambda x: torch.cat([x, F.pad(x, (0, 0, 1, 1))[1:-1] * 2], 0).cumsum(0), None,
                       lambda n: [_randn(n, 5)], [{0}]),
    "slices": (lambda x: x[1:, :3] + x[:-1, 2:5] + x.select(0, x.size(0) // 2)[:3], None, lambda n: [_randn(n, 6)], [{0}]),
    "arange_mask": (lambda x: x.masked_fill(torch.arange(x.size(1)) > torch.arange(x.size(0)).unsqueeze(1), 0.0), None,
                    lambda n: [_randn(n, n)], [{0, 1}]),
}


@pytest.mark.parametrize("grads", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("name", list(CASES))
def test_one_compile_many_sizes(name, grads):
    fn, make_module, make_inputs, dims = CASES[name]
    torch.manual_seed(0)
    module = make_module() if make_module is not None else None
    stats.reset()
    with torch.set_grad_enabled(grads):
        compiled = check_sizes(fn, make_inputs, dims, sizes=SIZES, module=module, grads=grads, atol=1e-4, rtol=1e-4)
    assert stats.dynamic_graphs == 1 and not stats.dynamic_fallbacks, stats.dynamic_fallbacks
    assert not stats.eager_fallbacks, stats.eager_fallbacks
    assert (getattr(compiled, "plan", None) is not None) == grads  # training: a joint graph, partitioned


def _mutate_through_views(x):
    x.narrow(0, 1, x.size(0) - 1).select(1, 0).fill_(0.5)
    x.view(-1).mul_(2)
    x.add_(1)
    return x.sum(1)


@pytest.mark.parametrize("fn", [_mutate_through_views, lambda x: x.unbind(1)[0] + x.chunk(2, 1)[1].sum(1)],
                         ids=["mutate_input_through_views", "unbind_chunk"])
def test_inference_one_compile_many_sizes(fn):
    stats.reset()
    check_sizes(fn, lambda n: [torch.randn(n, 6)], [{0}])
    assert stats.dynamic_graphs == 1 and not stats.dynamic_fallbacks


def test_input_mutation_written_back_at_every_size():
    x = torch.randn(8, 6)
    gm = dynamic_gm(_mutate_through_views, [x.clone()], [{0}])
    fn = compile_aot_eager(gm, [x.clone()], fallback=False)
    for n in SIZES:
        a = torch.randn(n, 6)
        b = a.clone()
        torch.testing.assert_close(fn(a), _mutate_through_views(b))
        torch.testing.assert_close(a, b)


def test_variance_backward_specializes_soundly():
    """torch's C++ formula for var's backward divides by the count as a float: the size becomes a
    constant (a guard), the result stays right and other sizes fail the guards (recompile)."""
    f = lambda x: (x - x.mean(0)) / x.var(0).sqrt()  # noqa: E731
    x = torch.randn(8, 5, requires_grad=True)
    gm = dynamic_gm(f, [x], [{0}])
    fn = compile_aot_eager(gm, [x.detach().requires_grad_()], fallback=False)
    y = x.detach().clone().requires_grad_()
    torch.testing.assert_close(torch.autograd.grad(fn(y).sum(), y), torch.autograd.grad(f(x).sum(), x))
    assert check_guards(gm, [torch.randn(5, 5)]) is not None
