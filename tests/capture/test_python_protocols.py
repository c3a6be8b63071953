"""Unit tests of the capture stage's models of Python protocols: binary operators with Python objects
(values/binary_dunders.py), dict keys with a Python __hash__ (values/hashed_keys.py), exception objects
(values/exceptions.py) and class attribute reads (values/objects.class_source)."""
import torch

import kiln
from kiln.capture.sources import ConstantSource, GenericAttrSource, LocalSource
from kiln.capture.values import binary_dunders, exceptions, hashed_keys
from kiln.capture.values.class_stores import class_source


def setup_function():
    kiln.reset()


def _report(fn, *args):
    report = kiln.explain(fn, backend="eager")(*args)
    return report.graph_count, [str(r) for r in report.break_reasons]


class Base:
    def __add__(self, other):
        return 1

    def __radd__(self, other):
        return 2


class Overrides(Base):
    def __radd__(self, other):
        return 3


class Inherits(Base):
    pass


class OnlyRadd:
    def __radd__(self, other):
        return "r"


class TorchFn:
    def __radd__(self, other):
        return 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return NotImplemented


def test_slots_and_overrides_follow_typeobject_c():
    assert binary_dunders._has_slot(OnlyRadd, "add") and not binary_dunders._has_slot(OnlyRadd, "mul")
    assert binary_dunders._overrides(Base, Overrides, "__radd__")
    assert not binary_dunders._overrides(Base, Inherits, "__radd__")
    assert not binary_dunders._overrides(Base, OnlyRadd, "__add__")  # (missing on the right: not overloaded)


def test_reflected_operand_in_one_graph():
    def fn(x):
        return x + (3 + OnlyRadd() == "r") + (Base() + Overrides()) + (Base() + Inherits())

    graphs, reasons = _report(fn, torch.ones(2))
    assert graphs == 1 and not reasons, reasons
    assert torch.equal(kiln.compile(fn, backend="eager")(torch.ones(2)), fn(torch.ones(2)))


def test_unmodelled_builtin_operand_and_torch_function_break_with_reasons():
    def seq(x):
        return x + len("ab" + OnlyRadd())  # str's own concatenation is not modelled

    def tf(x):
        return (x + TorchFn()) + x

    assert any("kiln does not model the builtin's method" in r for r in _report(seq, torch.ones(2))[1])
    assert any("__torch_function__" in r for r in _report(tf, torch.ones(2))[1])


class HKey:
    def __init__(self, k):
        self.k = k

    def __hash__(self):
        return hash(self.k)

    def __eq__(self, other):
        return isinstance(other, HKey) and self.k == other.k


class EqOnly:
    def __eq__(self, other):
        return True


def test_has_python_hash():
    assert hashed_keys.has_python_hash(HKey)
    assert not hashed_keys.has_python_hash(EqOnly)  # __hash__ is None: TypeError (unhashable), elsewhere
    assert not hashed_keys.has_python_hash(Base)  # object's identity hash: ObjectKey


def test_constant_key_with_an_object_keys_hash_breaks():
    def fn(x):
        d = {HKey("a"): x}
        d["a"] = x * 2  # CPython would call HKey.__eq__ (reflected) for the str key of equal hash
        return len(d)

    graphs, reasons = _report(fn, torch.ones(2))
    assert any("has the hash of an object key" in r for r in reasons), reasons


def test_set_operation_on_hashed_members_breaks():
    def fn(x):
        s = {HKey(1)} | {HKey(1)}
        return x + len(s)

    graphs, reasons = _report(fn, torch.ones(2))
    assert any("set operation on members with a Python __hash__" in r for r in reasons), reasons


class WithInit(ValueError):
    def __init__(self, msg, n):
        super().__init__(msg)
        self.n = n


class WithNew(ValueError):
    def __new__(cls, *args):
        return super().__new__(cls, *args)


def test_exception_classes_modelled():
    assert exceptions.has_python_init_only(WithInit)
    assert not exceptions.has_python_init_only(WithNew)

    class OSErr(OSError):
        def __init__(self):
            super().__init__(2, "x")

    assert not exceptions.has_python_init_only(OSErr)  # OSError's __init__ fills errno, strerror, ...


def test_rebuilt_exception_keeps_args_and_attributes_without_running_init():
    exc = exceptions.rebuild_exception_state(WithInit, ("m",), ("n",), (5,), None, None, False)
    assert type(exc) is WithInit and exc.args == ("m",) and exc.n == 5 and str(exc) == "m"

    def fn(x):
        return x + 1, WithInit("bad", 3)

    out, e = kiln.compile(fn, backend="eager")(torch.ones(2))
    assert type(e) is WithInit and e.args == ("bad",) and e.n == 3


def test_class_attribute_source():
    assert isinstance(class_source(HKey, None), ConstantSource)

    class Held:
        source = LocalSource("obj")

    assert class_source(HKey, Held()) == GenericAttrSource(LocalSource("obj"), "__class__")


def test_module_member_methods_guard_the_tables_they_walk():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x):
            return x * sum(p.sum() for p in self.parameters()), [n for n, _ in self.named_parameters()]

    net = Net()
    graphs, reasons = _report(net, torch.ones(2))
    assert graphs == 1 and not reasons, reasons
    compiled = kiln.compile(net, backend="eager")
    compiled(torch.ones(2))
    net.extra = torch.nn.Parameter(torch.full((2,), 10.0))  # a new parameter: the keys' guard fails
    out, names = compiled(torch.ones(2))
    ref, ref_names = net(torch.ones(2))
    assert names == ref_names == ["extra", "fc.weight", "fc.bias"] and torch.allclose(out, ref)


def test_user_hash_result_as_cpython_converts_it():
    class Big:
        def __hash__(self):
            return 2 ** 64  # larger than a Py_ssize_t: int's hash of it (8)

    class MinusOne:
        def __hash__(self):
            return -1  # -1 is CPython's error value: -2

    def fn(x):
        d = {Big(): x, MinusOne(): x}
        return len(d)

    graphs, reasons = _report(fn, torch.ones(2))
    assert not reasons, reasons

    def collides(x):
        d = {Big(): x}
        d[8] = x  # hash(8) == hash(Big()): CPython compares them
        return len(d)

    assert any("has the hash of an object key" in r for r in _report(collides, torch.ones(2))[1])


def test_a_set_computed_at_trace_time_keeps_the_real_iteration_order():
    from kiln.capture.values.builder import wrap_constant_result
    from kiln.capture.values.containers import SetValue

    real = {"w", "b", "zz", "c"} & {"b", "c", "zz"}
    value = wrap_constant_result(real)
    assert isinstance(value, SetValue)
    assert [m.value for m in value.members.values()] == list(real)


def test_tensor_dict_keys_are_identity_keys_holding_their_value():
    from kiln.capture.values.container_keys import ObjectKey, TensorKey, dict_key, key_value, set_key
    from kiln.capture.values.tensors import TensorValue

    class Fake(TensorValue):  # only what dict_key reads
        def __init__(self, example):
            self.example = example

    a, b = torch.ones(1), torch.ones(1)
    va, va2, vb = Fake(a), Fake(a), Fake(b)
    ka = dict_key(None, va)
    assert isinstance(ka, TensorKey) and isinstance(ka, ObjectKey) and key_value(ka) is va
    assert ka == dict_key(None, va2) and hash(ka) == hash(dict_key(None, va2))  # one tensor, one key
    assert ka != dict_key(None, vb)  # equal data, other object: another key (tensors hash by identity)
    assert ka == set_key(None, va2)  # dicts and sets agree (keys views & sets)


def test_known_hash_of_tuples_is_cpythons():
    class Seven:
        def __hash__(self):
            return 7

    # a tuple's hash reads only its items' hashes: stand-ins with the same hashes give the same hash
    items = (Seven(), "a", (1, 2.5), None)
    stand_ins = tuple(hashed_keys._KnownHash(hash(v)) for v in items)
    assert hash(stand_ins) == hash(items)


def test_hash_repr_and_fstring_of_python_objects_traced():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Key:
        a: int = 1
        b: tuple = ("x", 2)

    class Named:
        def __repr__(self):
            return "Named()"

    def fn(x):
        return x + 1, hash(Key()), hash((Key(), 3)), repr(Named()), f"{Named()!r:>8}|{Named()}"

    graphs, reasons = _report(fn, torch.ones(2))
    assert graphs == 1 and not reasons, reasons
    out = kiln.compile(fn, backend="eager")(torch.ones(2))
    assert out[1:] == (hash(Key()), hash((Key(), 3)), "Named()", " Named()|Named()")
