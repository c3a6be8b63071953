"""Functions kiln inlines: their defaults are read through guarded places, and one guard checks that
every inlined function keeps the code kiln inlined (GuardSet.note_function_code, called where the interpreter inlines a function)."""
import torch

import kiln


def _helper(x):
    return x * 2


def _other(x):
    return x * 5


def _with_default(x, seen=[]):  # noqa: B006 -- the state kept between calls is the point
    seen.append(1)
    return x * len(seen)


class Scale(torch.nn.Module):
    def forward(self, x):
        return _helper(x) + 1


def test_one_guard_covers_every_inlined_functions_code():
    def f(x):
        return _helper(x) + _helper(x + 1)

    report = kiln.explain(f)(torch.ones(2))
    text = "\n".join(report.guards)
    assert text.count("___same_codes(") == 1 and "keep their code" in text


def test_code_replaced_in_place_recompiles_for_a_method_and_a_helper():
    m = Scale()
    compiled = kiln.compile(m)
    x = torch.ones(3)
    saved_helper, saved_forward = _helper.__code__, Scale.forward.__code__
    try:
        torch.testing.assert_close(compiled(x), m(x))
        _helper.__code__ = _other.__code__  # what IPython's autoreload does to an edited function
        torch.testing.assert_close(compiled(x), m(x))
        assert torch.equal(compiled(x), torch.full((3,), 6.0))
        Scale.forward.__code__ = (lambda self, x: x - 1).__code__
        torch.testing.assert_close(compiled(x), m(x))
    finally:
        _helper.__code__, Scale.forward.__code__ = saved_helper, saved_forward


def test_a_mutable_default_is_state_kept_between_calls():
    def f(x):
        return _with_default(x) + 1

    compiled = kiln.compile(f)
    _with_default.__defaults__[0].clear()
    got = [compiled(torch.ones(2)) for _ in range(3)]
    assert [g[0].item() for g in got] == [2.0, 3.0, 4.0]
    assert _with_default.__defaults__[0] == [1, 1, 1]
