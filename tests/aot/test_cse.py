"""Common subexpression elimination on ATen graphs (``kiln.aot.graph.eliminate_common_subexpressions``)."""
import torch
import torch.fx as fx

from kiln.aot.schema import is_random
from kiln.backends.aot_eager import compile_aot_eager
from tests.aot.helpers import compare

aten = torch.ops.aten


def _ops(compiled, op):
    return [n for n in compiled.aten_graph.gm.graph.nodes if n.target is op]


def test_repeated_computation_is_one_node():
    def fn(x):
        a = (x + 1).relu()
        b = (x + 1).relu()  # the same value again, as per-layer code computes a shared mask
        return a * b

    compiled = compare(fn, torch.randn(4, 5))
    assert len(_ops(compiled, aten.add.Tensor)) == 1


def test_equal_looking_scalars_of_other_types_are_not_merged():
    def fn(x):
        return (x + 1) * (x + 1.0), (x * 0.0), (x * -0.0), (x + True)

    x = torch.arange(6).view(2, 3)
    compiled = compare(fn, x)
    assert len(_ops(compiled, aten.add.Tensor)) == 3
    assert len(_ops(compiled, aten.mul.Tensor)) == 3
    got = compiled(x)
    assert torch.equal(torch.signbit(got[2]), torch.signbit(fn(x)[2]))  # -0.0 kept apart from 0.0


def test_outputs_stay_distinct_tensors():
    def fn(x):
        return x + 1, x + 1, (x * 2).t(), (x * 2).t()

    compiled = compare(fn, torch.randn(3, 4))
    a, b, c, d = compiled(torch.randn(3, 4))
    a.add_(1)
    c.add_(1)
    assert not torch.equal(a, b) and not torch.equal(c, d)  # eager returns four tensors


def test_random_values_and_fresh_allocations_are_not_merged():
    def fn(x):
        return torch.rand_like(x) + torch.rand_like(x), torch.empty_like(x).fill_(1) + torch.empty_like(x).fill_(2)

    x = torch.randn(64)
    compiled = compile_aot_eager(fx.symbolic_trace(fn), [x], fallback=False)
    r, filled = compiled(x)
    random = [n for n in compiled.aten_graph.gm.graph.nodes if n.op == "call_function" and is_random(n.target)]
    assert len(random) == 2, compiled.aten_graph.gm.graph
    assert torch.equal(filled, torch.full((64,), 3.0))



def test_data_dependent_results_are_not_merged():
    # two nonzero(x) have unbacked sizes u0 and u1 that later metadata names: kept apart; abs(x) merged
    from kiln.aot.graph import eliminate_common_subexpressions
    from kiln.fake.symbolic import ShapeEnv
    from kiln.fake.unbacked import nonzero

    env = ShapeEnv()
    graph = fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(8, device="meta")
    outs = []
    for _ in range(2):
        nz = graph.call_function(aten.nonzero.default, (x,))
        nz.meta["val"] = nonzero(env, x.meta["val"])
        ab = graph.call_function(aten.abs.default, (x,))
        ab.meta["val"] = x.meta["val"]
        outs.append(graph.call_function(aten.sum.default, (nz,)))
        outs.append(graph.call_function(aten.sum.default, (ab,)))
    graph.output(tuple(outs))
    assert eliminate_common_subexpressions(graph) == 1
    assert len([n for n in graph.nodes if n.target is aten.nonzero.default]) == 2
    assert len([n for n in graph.nodes if n.target is aten.abs.default]) == 1
