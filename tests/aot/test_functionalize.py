import operator

import pytest
import torch
import torch.fx as fx

from kiln.aot import aot_trace, verify
from kiln.backends.aot_eager import compile_aot_eager
from kiln.fake import UnsupportedFakeOp

from tests.aot.helpers import compare

aten = torch.ops.aten


def targets(compiled):
    return [n.target for n in compiled.aten_graph.gm.graph.nodes if n.op == "call_function"]


def assert_functional(compiled):
    for t in targets(compiled):
        if isinstance(t, torch._ops.OpOverload):
            assert not t._schema.is_mutable, t


def test_pure_graph_has_no_writebacks():
    c = compare(lambda x, y: torch.relu(x @ y) + 1, torch.randn(3, 4), torch.randn(4, 5))
    assert c.aten_graph.mutated_inputs == []
    assert "aten.mm.default" in c.aten_graph.format()


def test_inplace_on_input_is_written_back():
    def f(x):
        x.add_(1)
        x[0].mul_(2)
        return x * 2

    c = compare(f, torch.randn(3, 4))
    assert c.aten_graph.mutated_inputs == [0]
    assert_functional(c)
    assert aten.select_scatter.default in targets(c)


def test_mutation_through_views_and_outputs_aliasing_input():
    def f(x):
        y = x.view(-1)
        z = y[2:5]
        z.zero_()
        return x, y, z

    x = torch.randn(3, 4)
    c = compare(f, x)
    x2 = x.clone()
    a, b, z = c(x2)
    assert a is x2
    assert b._base is x2 and z._base is x2  # outputs are real views of the input, as in eager
    z.fill_(7)
    assert x2.view(-1)[3] == 7


def test_outputs_aliasing_each_other():
    def f(x):
        a = x * 2
        b = a.t()
        b[0].fill_(3)
        return a, b, a

    c = compare(f, torch.randn(3, 4))
    a, b, a2 = c(torch.randn(3, 4))
    assert a2 is a and b.data_ptr() == a.data_ptr()  # b is a view of a
    b.add_(1)
    assert torch.equal(a.t(), b)


def test_mutation_of_view_of_intermediate_seen_by_other_views():
    def f(x):
        a = x.clone()
        v1 = a[:, 1]
        v2 = a.transpose(0, 1)
        v1.mul_(10)
        return v2 + 1

    compare(f, torch.randn(3, 4))


def test_split_unbind_and_generic_view_mutations():
    def f(x):
        a = x.clone()
        p, q = a.split(2, dim=1)
        q.add_(1)
        r = a.unbind(0)[1]
        r.sub_(3)
        u = a.unfold(1, 2, 1)  # no dedicated inverse: scattered by index
        u[0, 0].fill_(5)
        return a

    compare(f, torch.randn(3, 4))


def test_out_variant_and_copy():
    def f(x, y):
        out = x.new_empty(3, 4)  # (symbolic_trace bakes torch.empty(...) into a constant)
        torch.add(x, y, out=out)
        z = torch.zeros_like(x)
        z.copy_(out)
        return z, out

    c = compare(f, torch.randn(3, 4), torch.randn(3, 4))
    assert_functional(c)


def test_inplace_type_promotion_keeps_dtype():
    def f(x, y):
        x.mul_(y)  # f32 *= f64 stays f32
        return x

    compare(f, torch.randn(4), torch.randn(4, dtype=torch.float64))


def test_inplace_metadata_change_of_intermediate():
    def f(x):
        a = x + 1
        a.t_()
        a.unsqueeze_(0)
        a.add_(1)
        return a

    compare(f, torch.randn(3, 4))


def test_inplace_metadata_change_of_input_is_unsupported():
    gm = fx.symbolic_trace(lambda x: x.t_())
    with pytest.raises(UnsupportedFakeOp):
        aot_trace(gm, [torch.randn(2, 3)])
    compiled = compile_aot_eager(gm, [torch.randn(2, 3)])  # falls back to eager
    x = torch.randn(2, 3)
    assert compiled(x).shape == (3, 2)


def test_data_dependent_op_falls_back_to_eager():
    gm = fx.symbolic_trace(lambda x: torch.nonzero(x))
    compiled = compile_aot_eager(gm, [torch.randn(5)])
    x = torch.tensor([0.0, 1.0, 0.0, 2.0])
    assert torch.equal(compiled(x), torch.nonzero(x))
    assert "eagerly" in compiled.kiln_explain()


def test_buffer_mutation_and_parameter_inputs():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 4))
            self.register_buffer("steps", torch.zeros(1))
            self.register_buffer("acc", torch.zeros(4))

        def forward(self, x):
            self.steps.add_(x.new_ones(1))  # (a proxy argument keeps symbolic_trace from running it)
            y = x @ self.w
            self.acc.add_(y.sum(0).detach())
            return y

    c = compare(None, torch.randn(2, 4), module=M())
    kinds = [i.kind for i in c.aten_graph.inputs]
    assert kinds.count("parameter") == 1 and kinds.count("buffer") == 2
    assert len(c.aten_graph.mutated_inputs) == 2


def test_constants_are_fresh_per_call():
    def f(x):
        return torch.tensor([1.0, 2.0]) + x.sum()

    compare(f, torch.randn(3))

    def g(x):
        return x.new_ones(2)

    c = compare(g, torch.randn(3))
    a, b = c(torch.randn(3)), c(torch.randn(3))
    assert a.data_ptr() != b.data_ptr()


def test_ops_without_functional_variant_mutate_copies():
    def f(x):
        y = x.clone()
        torch.ops.aten._foreach_add_.Scalar([y], 2.0)
        return y

    c = compare(f, torch.randn(3))
    mutating = [n for n in c.aten_graph.gm.graph.nodes if n.meta.get("mutates_fresh_copies")]
    assert mutating


def test_gradients_flow_through_compiled_graph():
    def f(x, w, b):
        h = torch.tanh(x @ w + b)
        h = h * h.sigmoid()
        return h.sum(dim=1)

    inputs = [torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True), torch.randn(5, requires_grad=True)]
    gm = fx.symbolic_trace(f)
    compiled = compile_aot_eager(gm, inputs, fallback=False)
    k_in = [t.detach().clone().requires_grad_() for t in inputs]
    e_in = [t.detach().clone().requires_grad_() for t in inputs]
    compiled(*k_in).pow(2).sum().backward()
    f(*e_in).pow(2).sum().backward()
    for a, b in zip(k_in, e_in):
        torch.testing.assert_close(a.grad, b.grad)


def test_mutation_of_nonleaf_input_keeps_autograd_history():
    def f(x):
        x.mul_(3)
        return x.sum()

    leaf_k = torch.randn(4, requires_grad=True)
    leaf_e = leaf_k.detach().clone().requires_grad_()
    gm = fx.symbolic_trace(f)
    compiled = compile_aot_eager(gm, [leaf_k * 1], fallback=False)
    xk, xe = leaf_k * 2, leaf_e * 2
    compiled(xk)
    f(xe)
    torch.testing.assert_close(xk, xe)
    xk.sum().backward()
    xe.sum().backward()
    torch.testing.assert_close(leaf_k.grad, leaf_e.grad)


def test_getitem_nodes_and_provenance():
    def f(x):
        v, i = x.sort(dim=1)
        return v + i

    c = compare(f, torch.randn(3, 4))
    nodes = list(c.aten_graph.gm.graph.nodes)
    assert any(n.target is operator.getitem for n in nodes)
    assert all(n.meta.get("from_node") for n in nodes if n.op == "call_function")
    verify(c.aten_graph)


def test_inplace_op_whose_same_named_overload_differs_pow_scalar():
    def f(x):
        y = x.clone()
        y.pow_(2)  # pow_.Scalar's functional form is pow.Tensor_Scalar, not pow.Scalar
        return y

    c = compare(f, torch.randn(3, 4))
    assert aten.pow.Tensor_Scalar in targets(c)
