"""Unit tests of guard compilation: printable check functions, shared places, failures by name."""
import pytest
import torch

from kiln.capture.guards import GuardSet
from kiln.capture.sources import AttrSource, DictEntrySource, GetItemSource, LocalSource


class Obj:
    pass


def test_guard_function_checks_and_prints():
    guards = GuardSet()
    x = torch.randn(2, 3)
    guards.tensor(LocalSource("x"), x)
    guards.constant(LocalSource("n"), 4)
    guards.length(LocalSource("xs"), [1, 2])
    compiled = guards.compile()
    assert "def check(L, G, C, B)" in str(compiled)
    L = {"x": x, "n": 4, "xs": [0, 0]}
    assert compiled.check(L, {}, None, {})
    assert not compiled.check({**L, "n": 5}, {}, None, {})
    assert not compiled.check({**L, "x": torch.randn(3, 2)}, {}, None, {})
    assert not compiled.check({**L, "x": x.double()}, {}, None, {})
    assert not compiled.check({**L, "xs": [1]}, {}, None, {})
    assert "L['n']" in compiled.first_failure({**L, "n": 5}, {}, None, {})


def test_missing_attribute_means_no_match_not_an_error():
    guards = GuardSet()
    obj = Obj()
    obj.a = 1
    guards.constant(AttrSource(LocalSource("o"), "a"), 1)
    compiled = guards.compile()
    assert compiled.check({"o": obj}, {}, None, {})
    assert not compiled.check({"o": Obj()}, {}, None, {})


def test_shared_places_are_read_once():
    guards = GuardSet()
    m = torch.nn.Linear(2, 2)
    base = LocalSource("m")
    guards.identity(base, m)
    guards.identity(DictEntrySource(base, "_parameters", "weight"), m.weight)
    guards.identity(DictEntrySource(base, "_parameters", "bias"), m.bias)
    code = "\n".join(line.split("#")[0] for line in str(guards.compile()).splitlines())
    assert code.count("L['m']") == 1  # read into a local once


def test_distinct_tensor_inputs_are_guarded():
    guards = GuardSet()
    a, b = torch.randn(2), torch.randn(2)
    guards.tensor(LocalSource("a"), a)
    guards.tensor(LocalSource("b"), b)
    compiled = guards.compile()
    assert compiled.check({"a": a, "b": b}, {}, None, {})
    assert not compiled.check({"a": a, "b": a}, {}, None, {})


def test_not_object_guard_fails_when_the_place_holds_that_object():
    guards = GuardSet()
    held, other = torch.nn.Parameter(torch.ones(2)), torch.randn(2)
    guards.not_object(LocalSource("x"), held)
    compiled = guards.compile()
    assert compiled.check({"x": other}, {}, None, {})
    assert not compiled.check({"x": held}, {}, None, {})
    assert "is not the Parameter the graph holds" in compiled.first_failure({"x": held}, {}, None, {})


def test_prefix_names_are_not_confused():
    guards = GuardSet()
    o = Obj()
    o.fc, o.fc2 = 1, 2
    guards.constant(AttrSource(LocalSource("o"), "fc"), 1)
    guards.constant(AttrSource(LocalSource("o"), "fc2"), 2)
    guards.constant(GetItemSource(LocalSource("t"), 0), 5)
    compiled = guards.compile()
    assert compiled.check({"o": o, "t": (5,)}, {}, None, {})
    o.fc2 = 3
    assert not compiled.check({"o": o, "t": (5,)}, {}, None, {})


def test_held_tensors_are_checked_in_one_call_and_failures_name_the_tensor():
    from kiln.capture import hook

    if not hasattr(hook._C, "held_tensors_match"):
        pytest.skip("kiln's C extension is not built")
    w, b = torch.nn.Parameter(torch.randn(4, 3)), torch.zeros(4)
    guards = GuardSet()
    guards.held_tensor("L['m'].weight", w)
    guards.held_tensor("L['m'].bias", b)
    compiled = guards.compile()
    assert compiled.source_code.count("___obj") >= 2 and ".stride()" not in compiled.source_code  # one C call
    assert compiled.check({}, {}, None, {})
    for change in (lambda: setattr(w, "data", w.data.t()),  # strides (and size)
                   lambda: setattr(w, "data", w.data.double()),  # dtype
                   lambda: b.unsqueeze_(0),  # size, in place
                   lambda: b.requires_grad_(True)):
        saved_w, saved_b = w.data, b.detach().clone()
        change()
        assert not compiled.check({}, {}, None, {})
        failure = compiled.first_failure({}, {}, None, {})
        assert "L['m'].weight" in failure or "L['m'].bias" in failure, failure
        w.data = saved_w
        b = torch.zeros(4)  # a new object: rebuild the guards on it
        guards = GuardSet()
        guards.held_tensor("L['m'].weight", w)
        guards.held_tensor("L['m'].bias", b)
        compiled = guards.compile()
        assert compiled.check({}, {}, None, {})


def test_held_tensors_match_compares_each_field():
    from kiln.capture import hook

    match = getattr(hook._C, "held_tensors_match", None)
    if match is None:
        pytest.skip("kiln's C extension is not built")
    t = torch.randn(2, 3)
    want = (t.dtype, t.device, (2, 3), (3, 1), False)
    assert match((t,), (want,)) and match((), ())
    for i, other in enumerate((torch.float64, torch.device("meta"), (3, 2), (1, 2), True)):
        assert not match((t,), (want[:i] + (other,) + want[i + 1:],)), i
    with pytest.raises(TypeError):
        match((t,), ())
    with pytest.raises(AttributeError):
        match((1,), (want,))



def test_input_tensor_guard_is_one_c_call_per_tensor_and_checks_every_field():
    from kiln.capture import hook

    if not hasattr(hook._C, "tensor_matches"):
        pytest.skip("kiln's C extension is not built")
    x, y = torch.randn(2, 3), torch.randn(4)
    guards = GuardSet()
    guards.tensor(LocalSource("x"), x)
    guards.tensor(LocalSource("y"), y)
    compiled = guards.compile()
    assert ".stride()" not in compiled.source_code and "x is not" not in compiled.source_code
    assert "L['x']" in compiled.source_code and " is not v" in compiled.source_code  # distinct, pairwise
    L = {"x": x, "y": y}
    assert compiled.check(L, {}, None, {})
    for other in (torch.randn(3, 2), x.t().contiguous().t(), x.double(), x.clone().requires_grad_(),
                  torch.nn.Parameter(x.clone()), x.to("meta"), [1.0], y):
        assert not compiled.check({**L, "x": other}, {}, None, {}), other
        assert "L['x']" in compiled.first_failure({**L, "x": other}, {}, None, {})
    match = hook._C.tensor_matches
    want = (torch.Tensor, x.dtype, x.device, (2, 3), (3, 1), False)
    assert match(x, want)
    for i, other in enumerate((torch.nn.Parameter, torch.float64, torch.device("meta"), (3, 2), (1, 2), True)):
        assert not match(x, want[:i] + (other,) + want[i + 1:]), i
    with pytest.raises(TypeError):
        match(x, want[:5])


def test_distinct_inputs_beyond_a_few_use_a_set():
    ts = [torch.randn(2) for _ in range(7)]
    guards = GuardSet()
    for i, t in enumerate(ts):
        guards.tensor(LocalSource(f"t{i}"), t)
    compiled = guards.compile()
    L = {f"t{i}": t for i, t in enumerate(ts)}
    assert compiled.check(L, {}, None, {})
    assert not compiled.check({**L, "t6": ts[0]}, {}, None, {})
