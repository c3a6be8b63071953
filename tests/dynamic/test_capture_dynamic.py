"""Dynamic shapes at capture: which dims become symbols, the guards they get, how many compiles happen,
and that every call's result equals eager (backend "eager": the captured graph runs as is)."""
import pytest
import torch

import kiln
from kiln.api import config_of
from kiln.fake.symbolic import SpecializationError


def compiles(compiled) -> int:
    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


def run_sizes(fn, sizes, make, dynamic=None, backend="eager"):
    compiled = kiln.compile(fn, backend=backend, dynamic=dynamic)
    for n in sizes:
        args = make(n)
        expected = fn(*args)
        got = compiled(*args)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    return compiled


def test_automatic_dynamic_compiles_twice():
    def f(x):
        return (x * 2).sum(0) + x.shape[0]
    c = run_sizes(f, [8, 5, 13, 32, 7], lambda n: (torch.randn(n, 4),))
    assert compiles(c) == 2


def test_dynamic_true_compiles_once():
    def f(x):
        return torch.nn.functional.softmax(x.view(x.size(0), -1), dim=-1)
    c = run_sizes(f, [8, 5, 13], lambda n: (torch.randn(n, 3, 4),), dynamic=True)
    assert compiles(c) == 1


def test_dynamic_false_specializes_every_size():
    def f(x):
        return x + 1
    c = run_sizes(f, [8, 5, 13], lambda n: (torch.randn(n),), dynamic=False)
    assert compiles(c) == 3


def test_size_one_runs_in_the_dynamic_graph_and_zero_is_specialized():
    def f(x):
        return x.sum(0) * x.size(0)
    c = run_sizes(f, [8, 5, 1, 13, 1], lambda n: (torch.randn(n, 3),), dynamic=True)
    assert compiles(c) == 1  # the trace never asked whether the size is 1: s0 >= 1
    c = run_sizes(f, [8, 5, 0, 13, 0], lambda n: (torch.randn(n, 3),), dynamic=True)
    assert compiles(c) == 2  # one for sizes >= 1, one for the empty tensor


def test_a_first_size_of_one_stays_a_constant():
    def f(x):
        return x.sum(0) * x.size(0)
    c = run_sizes(f, [1, 8, 5, 1], lambda n: (torch.randn(n, 3),), dynamic=True)
    assert compiles(c) == 2  # size 1 first: a static graph (0/1 specialization), then one dynamic


def test_branch_on_size_guards_the_condition():
    def f(x):
        if x.shape[0] > 10:
            return x * 2
        return x - 1
    c = run_sizes(f, [4, 5, 6, 20, 30, 3], lambda n: (torch.randn(n),), dynamic=True)
    assert compiles(c) == 2
    guards = config_of(c).compiler.records[0].guards
    assert "s0 > 10" in guards or "s0 <= 10" in guards or "10 >= s0" in guards or "s0 < 11" in guards


def test_size_with_an_int_attribute_stays_symbolic():
    # self.max_len / self.heads are ints read from the frame: the size arithmetic with them stays
    # symbolic (a guard s0 > 10, a view by s0 * heads) and the attributes' values are guarded
    class M(torch.nn.Module):
        max_len, heads = 10, 2

        def forward(self, x):
            if x.size(0) > self.max_len:
                x = x[-self.max_len:]
            return x.view(x.size(0) * self.heads, -1).softmax(-1)
    m = M()
    c = run_sizes(m, [8, 5, 13, 32, 2], lambda n: (torch.randn(n, 4),))
    assert compiles(c) == 3
    assert "s0 <= 10" in config_of(c).compiler.records[1].guards
    m.max_len = 4  # the attribute's value is guarded: a new entry, still equal to eager
    x = torch.randn(6, 4)
    torch.testing.assert_close(c(x), m(x), rtol=0, atol=0)
    assert compiles(c) == 4


def test_size_arithmetic_in_views_and_slices():
    def f(x, y):
        b, n = x.shape
        z = x.view(b, n // 4, 4).sum(-1)
        return z + y[: b].relu(), x[1:b - 1].reshape(-1)
    c = run_sizes(f, [8, 5, 13, 32], lambda n: (torch.randn(n, 16), torch.randn(40, 4)), dynamic=True)
    assert compiles(c) == 1


def test_returned_size_follows_the_input():
    def f(x):
        return x.relu(), x.shape[0] * 3, x.numel()
    c = run_sizes(f, [8, 5, 13], lambda n: (torch.randn(n, 2),), dynamic=True)
    assert compiles(c) == 1


def test_len_of_a_tensor_is_its_symbolic_first_size():
    # len(x) is x.size(0): arithmetic, slices and a returned int stay symbolic (it was a constant: one
    # compile per size); range(len(x)) still needs the number (one entry per size, as range(x.shape[0]))
    def f(x):
        return x[: len(x) // 2] / len(x), len(x)
    c = run_sizes(f, [8, 5, 13, 6], lambda n: (torch.randn(n, 2),), dynamic=True)
    assert compiles(c) == 1

    def g(x):
        return sum(x[i] for i in range(len(x)))
    c = run_sizes(g, [3, 4, 3], lambda n: (torch.randn(n, 2),), dynamic=True)
    assert compiles(c) == 2


def test_min_max_of_sizes_pick_under_a_guard_and_stay_symbolic():
    # min(n, 4) / max(n, m): each comparison is a guard (one entry per side), the result the symbol or
    # the constant; Python's order for ties (the first of equal ones)
    def f(x, y):
        k = min(x.shape[0], 4)
        m = max(x.shape[0], y.shape[0], 3)
        return x[:k].sum(0) + m, torch.zeros(m), max(x.shape[0], 2)
    c = run_sizes(f, [8, 5, 13, 6], lambda n: (torch.randn(n, 2), torch.randn(7, 2)), dynamic=True)
    assert compiles(c) == 2  # s0 > 7 and s0 <= 7 (min(s0, 4) is 4 on both: s0 >= 5 here)
    c = run_sizes(f, [3, 2, 3], lambda n: (torch.randn(n, 2), torch.randn(n, 2)), dynamic=True)


def test_size_across_a_graph_break():
    def f(x):
        b = x.size(0)
        y = x * 2
        print("", end="")
        return y.view(b, -1).sum(1) + b
    c = run_sizes(f, [8, 5, 13], lambda n: (torch.randn(n, 2, 3),), dynamic=True)
    # each code object (the function and its resume function) compiles static once, then dynamic once
    assert sum(1 for r in config_of(c).compiler.records if r.graph is not None) == 4


def test_range_over_size_specializes():
    def f(x):
        out = x[0]
        for i in range(1, x.shape[0]):
            out = out + x[i]
        return out
    c = run_sizes(f, [3, 4, 3], lambda n: (torch.randn(n, 2),), dynamic=True)
    assert compiles(c) == 2  # the loop's trip count is a constant: one entry per size


def test_duck_sizing_and_distinct_sizes():
    def f(x, y):
        return x + y
    c = run_sizes(f, [8, 5, 13], lambda n: (torch.randn(n, 3), torch.randn(n, 3)), dynamic=True)
    assert compiles(c) == 1
    with pytest.raises(RuntimeError):
        c(torch.randn(4, 3), torch.randn(5, 3))  # eager raises too


def test_mark_dynamic_first_compile_and_bounds():
    def f(x):
        return x.cos()
    c = kiln.compile(f, backend="eager")
    for n in (8, 5, 13):
        x = torch.randn(n, 3)
        kiln.mark_dynamic(x, 0, min=2, max=16)
        torch.testing.assert_close(c(x), f(x))
    assert compiles(c) == 1
    x = torch.randn(20, 3)
    torch.testing.assert_close(c(x), f(x))  # outside max: another compile
    assert compiles(c) == 2


def test_mark_dynamic_then_specialized_is_an_error():
    def f(x):
        return x.reshape(2, x.shape[0] // 2) if x.shape[0] == 8 else x
    c = kiln.compile(f, backend="eager")
    x = torch.randn(8)
    kiln.mark_dynamic(x, 0)
    with pytest.raises(SpecializationError, match="marked dynamic"):
        c(x)


def test_mark_dynamic_bad_uses():
    with pytest.raises(ValueError, match="min"):
        kiln.mark_dynamic(torch.randn(4), 0, min=5, max=3)
    with pytest.raises(IndexError):
        kiln.mark_dynamic(torch.randn(4), 1)


def test_mark_static_keeps_a_dim_constant():
    def f(x):
        return x * 2
    c = kiln.compile(f, backend="eager", dynamic=True)
    for n in (4, 5):
        x = torch.randn(n, n)
        kiln.mark_static(x, 1)
        torch.testing.assert_close(c(x), f(x))
    assert compiles(c) == 2


def test_noncontiguous_input_stays_static():
    def f(x):
        return x + 1
    c = run_sizes(f, [4, 5, 6], lambda n: (torch.randn(3, n).t(),), dynamic=True)
    assert compiles(c) == 3


def test_op_without_symbolic_rule_retraces_static(monkeypatch):
    from kiln.fake import symbolic_meta
    from kiln.fake.symbolic_meta import SymbolicShapeUnsupported

    def refuse(func, *args, **kwargs):
        raise SymbolicShapeUnsupported(func, "no rule (test)")
    monkeypatch.setitem(symbolic_meta.RULES, torch.ops.aten.flip.default, refuse)

    def f(x):
        return x.flip(1) * 2
    c = run_sizes(f, [4, 5, 6], lambda n: (torch.randn(2, n),), dynamic=True)
    assert compiles(c) == 3
    assert any("flip" in k for k in kiln.stats.dynamic_fallbacks)


def test_training_step_with_dynamic_batch():
    lin = torch.nn.Linear(4, 3)

    def f(x):
        return lin(x).relu().sum()
    c = kiln.compile(f, backend="eager", dynamic=True)
    for n in (8, 5, 13):
        x = torch.randn(n, 4)
        lin.zero_grad()
        f(x).backward()
        expected = lin.weight.grad.clone()
        lin.zero_grad()
        c(x).backward()
        torch.testing.assert_close(lin.weight.grad, expected)
    assert compiles(c) == 1


def test_explain_shows_the_shape_guards():
    def f(x):
        return x * 2 if x.shape[0] > 3 else x
    report = kiln.explain(f, backend="eager", dynamic=True)(torch.randn(6, 2))
    text = str(report)
    assert "sizes of L['x']" in text and "s0 > 3" in text


def test_backends_without_dynamic_support_stay_static():
    seen = []

    def backend(gm, example_inputs):
        seen.append(tuple(example_inputs[0].shape))
        return gm.forward

    def f(x):
        return x + 1
    c = kiln.compile(f, backend=backend, dynamic=True)
    for n in (4, 5):
        x = torch.randn(n)
        torch.testing.assert_close(c(x), x + 1)
    assert seen == [(4,), (5,)]


def test_recompile_reason_names_the_shape_guard_and_line():
    kiln.stats.reset()

    def f(x):
        if x.shape[0] > 10:
            return x * 2
        return x - 1
    c = kiln.compile(f, backend="eager", dynamic=True)
    for n in (4, 5, 20):
        torch.testing.assert_close(c(torch.randn(n).fill_(1.0)), f(torch.randn(n).fill_(1.0)))
    (reason,) = kiln.stats.recompilations
    assert reason.startswith("shape guard failed: s0 <= 10") and "test_capture_dynamic.py" in reason


def test_kiln_backend_failure_in_a_dynamic_compile_compiles_static(monkeypatch):
    """Any error of a size-generic compile (torch 2.11's meta kernels recursed) becomes a static compile."""
    import kiln.backends.kiln as kb

    real = kb.aot_compile
    calls = []

    def flaky(gm, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RecursionError("maximum recursion depth exceeded (test)")
        return real(gm, *args, **kwargs)
    monkeypatch.setattr(kb, "aot_compile", flaky)
    kiln.stats.reset()

    def f(x):
        return (x * 2).relu()
    c = kiln.compile(f, dynamic=True)
    for n in (4, 5):
        x = torch.randn(n)
        torch.testing.assert_close(c(x), f(x))
    assert any("RecursionError" in k for k in kiln.stats.dynamic_fallbacks)
    assert compiles(c) == 2  # static after the failure: one compile per size
