"""Unit tests of user objects: recorded attribute stores and deletes, copy's break reasons, the guards
copy and identity take, and type.__call__ with a Python __new__ that must mutate a class."""
import copy

import torch

import kiln
from kiln.capture.side_effects import DELETED, AttrDelete, AttrWrite, SideEffects
from kiln.capture.values.base import ConstantValue


def setup_function():
    kiln.reset()


class _Obj:
    def __init__(self, obj):
        self.obj = obj  # what SideEffects keys writes by


def test_side_effects_store_delete_and_store_again():
    effects, target = SideEffects(), _Obj(object())
    effects.store_attr(target, "a", ConstantValue(1))
    effects.delete_attr(target, "a", existed=False)  # only undoes the store recorded in this trace
    assert effects.load_attr(target, "a") is None and not effects.attr_effects(target)
    effects.delete_attr(target, "b")
    assert effects.load_attr(target, "b") is DELETED
    effects.store_attr(target, "b", ConstantValue(2), raw=True)
    (write,) = effects.attr_effects(target)
    assert isinstance(write, AttrWrite) and write.raw and write.deleted_before  # replayed as delete + set
    effects.delete_attr(target, "c", raw=True)
    assert isinstance(effects.attr_effects(target)[-1], AttrDelete)


def _reasons(fn, *args):
    report = kiln.explain(fn, backend="eager")(*args)
    return report.graph_count, [str(r) for r in report.break_reasons]


class Custom:
    def __init__(self):
        self.v = 1

    def __deepcopy__(self, memo):
        return Custom()


def test_deepcopy_with_a_copy_hook_breaks_with_its_name():
    obj = Custom()

    def fn(x):
        return x + copy.deepcopy(obj).v

    graphs, reasons = _reasons(fn, torch.ones(2))
    assert any("defines __deepcopy__" in r for r in reasons), reasons


def test_deepcopy_of_a_parameter_or_a_tensor_that_requires_grad_breaks():
    p = torch.nn.Parameter(torch.ones(2))

    def fn(x):
        return x + copy.deepcopy(p)

    graphs, reasons = _reasons(fn, torch.ones(2))
    assert any("Parameter" in r for r in reasons), reasons

    def leaf(x):
        return copy.deepcopy(x) + 1

    graphs, reasons = _reasons(leaf, torch.ones(2, requires_grad=True))
    assert any("requires grad" in r for r in reasons), reasons


def test_deepcopy_of_a_view_breaks():
    def fn(x):
        return copy.deepcopy(x[1:]) + 1

    graphs, reasons = _reasons(fn, torch.ones(4))
    assert any("larger storage" in r for r in reasons), reasons


class Cached:
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance


def test_singleton_that_sets_its_class_attribute():
    Cached._instance = None

    def fn(x):
        return x + 1, Cached()

    report = kiln.explain(fn, backend="eager")(torch.ones(2))
    assert report.graph_count == 1 and not report.break_reasons  # the class store is recorded, replayed after
    assert isinstance(Cached._instance, Cached) and report.result[1] is Cached._instance  # one object


def test_deepcopy_guards_the_instance_dict_keys():
    class Box:
        def __init__(self):
            self.v = 1

    box = Box()

    def fn(x):
        return x + copy.deepcopy(box).v

    compiled = kiln.compile(fn, backend="eager")
    assert compiled(torch.ones(2)).tolist() == [2.0, 2.0]
    box.w = 5  # the copy now has one more attribute: the cached entry must not apply
    del box.v
    box.v = 3
    assert compiled(torch.ones(2)).tolist() == [4.0, 4.0]


def test_delattr_after_the_graph_in_program_order():
    class Box:
        pass

    box = Box()
    box.a, box.b = 1, 2

    def fn(x):
        del box.a
        box.c = box.b
        del box.b
        return x * box.c

    out = kiln.compile(fn, backend="eager")(torch.ones(2))
    assert out.tolist() == [2.0, 2.0] and vars(box) == {"c": 2}


def test_module_class_attribute_shadowed_later_by_an_instance_attribute():
    # a module's class attribute read through self: setting the same name on the instance later must
    # recompile (the guard that the instance __dict__ lacks the name), not return the old value
    class Scaled(torch.nn.Module):
        scale = 10

        def forward(self, x):
            return x * self.scale
    m = Scaled()
    c = kiln.compile(m, backend="eager", dynamic=False)
    x = torch.ones(3)
    torch.testing.assert_close(c(x), x * 10)
    m.scale = 4
    torch.testing.assert_close(c(x), x * 4)


def test_cached_property_traced_and_refused_where_cpython_differs():
    import functools

    class Slots:
        __slots__ = ("t",)

        def __init__(self, t):
            self.t = t

        def _double(self):
            return self.t * 2

        double = functools.cached_property(_double)  # no __dict__: CPython raises TypeError on read

    class Plain:
        def __init__(self, t):
            self.t = t

        @functools.cached_property
        def double(self):
            return self.t * 2

    def plain(x):
        p = Plain(x)
        return p.double + p.double

    def slotted(x):
        return Slots(x).double

    assert _reasons(plain, torch.ones(2)) == (1, [])
    try:
        kiln.compile(slotted, backend="eager")(torch.ones(2))
    except TypeError:
        pass  # as in eager (the frame ran as Python at the read)
    else:
        raise AssertionError("a cached_property of a __slots__ object must raise TypeError as in eager")
