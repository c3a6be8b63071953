"""In-place stores of mutated inputs (kiln/schedule/inplace.py): end to end against eager, and which
values the planner stores in place."""
import pytest
import torch

import kiln
from kiln.debug.stats import stats

OPTIONS = dict(warm_cache=False, choose_faster=False)


def _run(fn, *shapes, cpu_codegen="cpp", transpose=False):
    """Compile ``fn``, call it twice on fresh inputs against eager; the inputs' final contents and the
    results must match. Returns the number of in-place stores planned."""
    kiln.reset()
    stats.reset()
    compiled = kiln.compile(fn, options=kiln.Options(cpu_codegen=cpu_codegen, **OPTIONS))
    for seed in range(2):
        g = torch.Generator().manual_seed(seed)
        args = [torch.randn(*s, generator=g) for s in shapes]
        if transpose:
            args = [a.t() for a in args]
        ref = [a.clone() for a in args]
        got, want = compiled(*args), fn(*ref)
        torch.testing.assert_close(got, want)
        for a, r in zip(args, ref):
            torch.testing.assert_close(a, r)
    return stats.inplace_stores


def adam_like(p, g, m, v):
    with torch.no_grad():
        m.lerp_(g, 0.1)
        v.mul_(0.99).addcmul_(g, g, value=0.01)
        p.addcdiv_(m, v.abs().sqrt().add_(1e-8), value=-0.01)
    return None


@pytest.mark.parametrize("cpu_codegen", ["cpp", "triton"])
def test_update_of_several_inputs_is_stored_in_place(cpu_codegen):
    if cpu_codegen == "triton":
        pytest.importorskip("triton")
    assert _run(adam_like, (16, 8), (16, 8), (16, 8), (16, 8), cpu_codegen=cpu_codegen) == 3


def test_transposed_input_is_stored_in_its_own_layout():
    assert _run(adam_like, (8, 16), (8, 16), (8, 16), (8, 16), transpose=True) == 3


def test_old_value_read_after_the_mutation_is_not_overwritten():
    def fn(x):
        old = x * 2  # read again below, after x changed: it must see the old contents
        x.add_(1)
        return old + x.flip(0)

    _run(fn, (8, 4))


def test_value_read_at_another_index_is_not_stored_in_place():
    def fn(x):
        x.copy_(x.flip(0) + 1)  # element i reads element n-1-i: in place would read overwritten data
        return None

    assert _run(fn, (9, 3)) == 0


def test_value_from_a_reduction_of_the_old_contents():
    def fn(x):
        x.sub_(x.mean(dim=1, keepdim=True))
        return x.sum()

    _run(fn, (6, 5))


def test_input_returned_as_another_output_keeps_copy_semantics():
    def fn(x, y):
        x.mul_(2)
        return x, y + x

    _run(fn, (4, 4), (4, 4))


def test_mutation_through_a_view():
    def fn(x):
        x[1:].add_(1)
        x[0].mul_(3)
        return x.sum(0)

    _run(fn, (5, 3))


def test_option_off_copies_back():
    kiln.reset()
    stats.reset()
    compiled = kiln.compile(adam_like, options=kiln.Options(inplace_stores=False, **OPTIONS))
    args = [torch.randn(4, 4) for _ in range(4)]
    ref = [a.clone() for a in args]
    compiled(*args), adam_like(*ref)
    for a, r in zip(args, ref):
        torch.testing.assert_close(a, r)
    assert stats.inplace_stores == 0


def test_planner_unit_keeps_a_value_read_by_a_later_kernel_out_of_place():
    from kiln.backends.kiln import compile_graph
    from kiln.aot.trace import aot_trace
    from kiln.decomp import decomposition_table
    import torch.fx as fx

    def fn(x):
        x.add_(1)
        return None

    class M(torch.nn.Module):
        def forward(self, x):
            x.add_(1)
            return (x.sum(),)

    gm = fx.symbolic_trace(M())
    x = torch.randn(4, 4)
    ag = aot_trace(gm, [x], decompositions=decomposition_table())
    ag.gm.meta["kiln_mutated_inputs"] = list(ag.mutated_inputs)
    cg = compile_graph(ag.gm, kiln.Options(**OPTIONS), "cpp")
    assert "in place" in cg.wrapper.source
    # the sum reads the new value from the buffer written in place: the input itself
    out = cg.wrapper.compile()(x.clone())
    assert out[0] is not None


def test_in_place_store_counts_as_a_change_for_autograd():
    """A tensor saved for backward and then updated in place makes backward raise, as in eager."""
    def step(x, g):
        x.add_(g)
        return None

    kiln.reset()
    stats.reset()
    compiled = kiln.compile(step, options=kiln.Options(**OPTIONS))
    w = torch.randn(4, requires_grad=True)
    for fn in (step, compiled):
        x = torch.randn(4)
        loss = (w * x).sum()  # saves x
        before = x._version
        fn(x, torch.ones(4))
        assert x._version > before
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    assert stats.inplace_stores == 1
