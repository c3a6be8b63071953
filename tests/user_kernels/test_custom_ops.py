"""torch.library custom ops inside compiled code: one graph node each, fake propagation from their fake
impls, one ATen node (not decomposed), user autograd formulas in training graphs, mutations functionalized
through a functional twin, extern calls in the kiln backend."""
import re

import pytest
import torch

import kiln
from kiln.aot.functional_twin import functional_twin
from kiln.aot.trace import aot_trace
from tests.user_kernels import custom_ops as ops
from tests.user_kernels.helpers import CaptureBackend, check

BACKENDS = ["eager", "aot_eager", "kiln"]


def uses_ops(x):
    return ops.mysin(x.cos()) + torch.ops.kiln_test_lib.twice(x)


def mutates(x, acc):
    ops.add_into(acc, x * 2)
    torch.ops.kiln_test_lib.fill_(x, 1.5)
    return acc + 1, x * x


def mutates_and_returns(x, buf):
    s = ops.scale_and_sum(x, buf, 3.0)
    return s + buf.mean()


def mutates_a_view(x):
    y = x.clone()
    v = y[2:]
    ops.add_into(v, x[:6])
    return y.sum(), v * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_ops_are_one_graph(backend):
    check(uses_ops, lambda: (torch.randn(8),), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [mutates, mutates_and_returns, mutates_a_view])
def test_mutating_custom_ops_write_back(backend, fn):
    args = {mutates: lambda: (torch.randn(8), torch.ones(8)),
            mutates_and_returns: lambda: (torch.randn(8), torch.randn(8)),
            mutates_a_view: lambda: (torch.randn(8),)}[fn]
    check(fn, args, backend)


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_training_uses_the_registered_backward(backend):
    def fn(x):
        return ops.mysin(x.cos()) * x

    x = torch.randn(8, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    joint = kiln.stats.snapshot()["joint_graphs"]
    out = kiln.compile(fn, backend=backend)(x)
    out.sum().backward()
    fn(xr).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)  # the user's formula has a factor 10 sin's lacks
    assert kiln.stats.snapshot()["joint_graphs"] == joint + 1


def test_op_without_fake_breaks_with_a_reason():
    def fn(x):
        return ops.nofake(x) + 1

    check(fn, lambda: (torch.randn(4),), "eager", graphs=2, breaks=1)
    reasons = " ".join(kiln.stats.snapshot()["graph_breaks"])
    assert "kiln_test::nofake has no fake (meta) implementation" in reasons


def test_op_without_autograd_breaks_when_an_input_requires_grad():
    def fn(x):
        return torch.ops.kiln_test_lib.twice(x) + 1

    x = torch.randn(4, requires_grad=True)
    kiln.compile(fn, backend="eager")(x)
    assert any("kiln_test_lib.twice has no autograd formula" in r for r in kiln.stats.snapshot()["graph_breaks"])
    check(fn, lambda: (torch.randn(4),), "eager")  # without grad: one graph


def test_capture_records_one_node_with_fake_metadata():
    backend = CaptureBackend()
    kiln.compile(lambda x: ops.rowsum(x) * 2, backend=backend)(torch.randn(3, 5))
    (gm,) = backend.graphs
    (node,) = [n for n in gm.graph.nodes if n.target is torch.ops.kiln_test.rowsum.default]
    assert tuple(node.meta["example_value"].shape) == (3,)


def _aten_graph(fn, *args):
    backend = CaptureBackend()
    kiln.compile(fn, backend=backend)(*[a.clone() for a in args])
    (gm,) = backend.graphs
    return aot_trace(gm, list(args))


def test_aot_keeps_a_custom_op_whole():
    ag = _aten_graph(lambda x: ops.mysin(x) + 1, torch.randn(4))
    targets = [n.target for n in ag.call_nodes()]
    assert targets.count(torch.ops.kiln_test.mysin.default) == 1
    assert all(t.namespace == "aten" for t in targets if t is not torch.ops.kiln_test.mysin.default)


def test_aot_functionalizes_a_mutating_op_into_its_twin():
    ag = _aten_graph(mutates, torch.randn(8), torch.ones(8))
    targets = [str(n.target) for n in ag.call_nodes()]
    assert "kiln_functional.kiln_test__add_into__default.default" in targets
    assert "kiln_functional.kiln_test_lib__fill___default.default" in targets
    assert not any(n.target._schema.is_mutable for n in ag.call_nodes())
    assert sorted(ag.mutated_inputs) == [0, 1]  # both arguments are written back after the graph


def test_functional_twin_copies_what_the_op_mutates():
    twin = functional_twin(torch.ops.kiln_test.scale_and_sum.default)
    assert str(twin.op._schema) == \
        "kiln_functional::kiln_test__scale_and_sum__default(Tensor x, Tensor buf, float k) -> (Tensor, Tensor)"
    x, buf = torch.ones(3), torch.ones(3).t()
    total, new_buf = twin.op(x, buf, 2.0)
    assert torch.equal(buf, torch.ones(3)) and torch.equal(new_buf, torch.full((3,), 2.0))
    assert total.item() == 9.0 and twin.new_values == {"buf": 1} and twin.results == {0: 0}
    assert functional_twin(torch.ops.aten.add_.Tensor) is None  # ATen ops have their own functional forms


def test_kiln_backend_runs_custom_ops_as_extern_calls():
    def fn(x, acc):
        ops.add_into(acc, ops.mysin(x))
        return acc * 2

    fallbacks = dict(kiln.stats.snapshot()["aten_fallbacks"])
    text = str(kiln.explain(fn)(torch.randn(8), torch.ones(8)))
    assert "custom op kiln_test::mysin (the user's kernel)" in text
    assert "custom op kiln_test__add_into__default (functional form" in text
    # the wrapper calls the user's op, then its functional twin on the accumulator, in graph order
    assert re.search(r"extern0 = aten_0\(x\)  # custom op kiln_test::mysin", text), text
    assert re.search(r"= aten_1\(acc, buf1\)  # custom op kiln_test__add_into", text), text
    assert dict(kiln.stats.snapshot()["aten_fallbacks"]) == fallbacks  # user kernels are not ATen fallbacks


def test_mutated_argument_sharing_memory_with_another_breaks():
    def fn(x):
        ops.add_into(x[:4], x[4:])  # disjoint views of one storage: kiln cannot tell the op's reads apart
        return x * 2

    # graphs: before the call, the op's own Python body (run at the break, offered to kiln), after the call
    check(fn, lambda: (torch.randn(8),), "aot_eager", graphs=3, breaks=1)
    assert any("'out', which it mutates, shares memory with 'x'" in r for r in kiln.stats.snapshot()["graph_breaks"])


def test_kiln_backend_hands_an_unread_empty_tensor_to_the_op_without_copying():
    def fn(x):
        y = torch.empty(8)
        torch.ops.kiln_test_lib.fill_(y, 2.0)
        return y * x

    check(fn, lambda: (torch.randn(8),), "kiln")
    text = str(kiln.explain(fn)(torch.randn(8)))
    assert "InPlaceCall(kiln_test_lib.fill_.default, fresh=[('x', None)])" in text
    assert "= aten_0(None, 2.0)" in text, text


def test_op_returning_a_number_breaks():
    def fn(x):
        return x * ops.count_positive(x)

    # (the op's own body, run as Python at the break, is offered to kiln too: a graph and a break of its own)
    check(fn, lambda: (torch.ones(4),), "eager", graphs=2, breaks=2)
    assert any("count_positive returns a int" in r for r in kiln.stats.snapshot()["graph_breaks"])


def test_an_overload_read_from_the_packet_keeps_the_checks():
    def fn(x):
        return torch.ops.kiln_test_lib.twice.default(x) + 1

    x = torch.randn(4, requires_grad=True)
    kiln.compile(fn, backend="eager")(x)
    assert any("kiln_test_lib::twice has no autograd formula" in r for r in kiln.stats.snapshot()["graph_breaks"])


def test_op_without_autograd_and_integer_results_stays_in_the_graph_under_grad():
    def fn(x):
        return x[torch.arange(3), torch.ops.kiln_test_lib.argmax_rows(x)] * 2

    x = torch.randn(3, 5, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    breaks = sum(kiln.stats.snapshot()["graph_breaks"].values())
    out = kiln.compile(fn, backend="aot_eager")(x)
    out.sum().backward()
    fn(xr).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    assert sum(kiln.stats.snapshot()["graph_breaks"].values()) == breaks


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_op_with_a_data_dependent_output_size(backend):
    """A fake implementation that asks ``torch.library.get_ctx().new_dynamic_size()``: the op's result
    size is an unbacked symbol read at run time; one graph, no break, right on data with other counts."""
    def f(x):
        p = ops.positive_positions(x * 2)
        return p + 1, x[p].sum()

    cf = kiln.compile(f, backend=backend)
    for seed in range(3):
        x = torch.randn(10, generator=torch.Generator().manual_seed(seed))
        got, want = cf(x), f(x)
        assert torch.equal(got[0], want[0]) and torch.allclose(got[1], want[1])
    report = kiln.explain(f, backend=backend)(x)
    assert report.graph_count == 1 and report.graph_break_count == 0, report
