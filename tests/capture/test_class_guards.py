"""Class guards (kiln/capture/class_guards.py): a class changed after compiling (a method replaced on the
object's class, a base or a mixin, a classmethod/staticmethod/property replaced, a class attribute, a
`__getattr__` added) never runs the old graph: each compiled result equals eager's after the change."""
import pytest
import torch
import torch.nn as nn

import kiln
from kiln.capture.class_guards import ClassGuard, make_state
from kiln.capture.guard_gate import gate_functions
from kiln.debug.stats import stats

X = torch.randn(4)


def after(fn, mutate, *args):
    """Compile ``fn``, call it twice (the second call records the guard's tags), mutate, then compare with
    eager twice (the second call: after whatever the first recorded)."""
    args = args or (X,)
    compiled = kiln.compile(fn, backend="eager")
    torch.testing.assert_close(compiled(*args), fn(*args))
    compiled(*args)
    mutate()
    torch.testing.assert_close(compiled(*args), fn(*args))
    torch.testing.assert_close(compiled(*args), fn(*args))


def test_method_replaced_on_the_objects_own_class():
    class Act:
        def apply(self, x):
            return x.relu()

    act = Act()

    def mutate():
        Act.apply = lambda self, x: x.sigmoid()
    after(lambda x: act.apply(x) + 1, mutate)


def base_and_child():
    class Base:
        def apply(self, x):
            return x * 2

    class Child(Base):
        pass

    return Base, Child


def test_method_replaced_on_a_base_class():
    Base, Child = base_and_child()
    obj = Child()

    def mutate():
        Base.apply = lambda self, x: x * 3
    after(lambda x: obj.apply(x), mutate)


def test_method_of_a_base_shadowed_on_the_subclass_later():
    Base, Child = base_and_child()
    obj = Child()

    def mutate():
        Child.apply = lambda self, x: x - 1  # a new name in Child's dict, Base's unchanged
    after(lambda x: obj.apply(x), mutate)


def test_mixin_method_replaced():
    class ScaleMixin:
        def scale(self, x):
            return x * 2

    class Block(ScaleMixin, nn.Module):
        def forward(self, x):
            return self.scale(x).relu()

    m = Block()

    def mutate():
        ScaleMixin.scale = lambda self, x: x * -4
    after(m, mutate)


def test_module_forward_replaced_on_its_class():
    class Act(nn.Module):
        def forward(self, x):
            return x.relu()

    m = nn.Sequential(nn.Linear(4, 4), Act())

    def mutate():
        Act.forward = lambda self, x: x.tanh()
    with torch.no_grad():
        after(m, mutate)


def test_classmethod_replaced():
    class Cfg:
        @classmethod
        def factor(cls):
            return 2

    def fn(x):
        return x * Cfg.factor()

    def mutate():
        Cfg.factor = classmethod(lambda cls: 5)
    after(fn, mutate)


def test_classmethod_through_an_instance_replaced():
    class Cfg:
        @classmethod
        def factor(cls):
            return 2

    cfg = Cfg()

    def mutate():
        Cfg.factor = classmethod(lambda cls: 7)
    after(lambda x: x * cfg.factor(), mutate)


def test_staticmethod_replaced():
    class Ops:
        @staticmethod
        def act(x):
            return x.relu()

    ops = Ops()

    def mutate():
        Ops.act = staticmethod(lambda x: x.exp())
    after(lambda x: ops.act(x) + Ops.act(x), mutate)


def test_property_replaced():
    class Holder:
        def __init__(self):
            self.k = 2

        @property
        def factor(self):
            return self.k

    h = Holder()

    def mutate():
        Holder.factor = property(lambda self: self.k * 10)
    after(lambda x: x * h.factor, mutate)


def test_property_added_over_an_instance_attribute():
    class Holder:
        def __init__(self):
            self.factor = 2

    h = Holder()

    def mutate():
        Holder.factor = property(lambda self: 9)  # a data descriptor wins over the instance dict
    after(lambda x: x * h.factor, mutate)


def test_class_attribute_int_config_changed():
    class Cfg:
        depth = 2

    cfg = Cfg()

    def fn(x):
        for _ in range(cfg.depth):
            x = x * 2
        return x

    def mutate():
        Cfg.depth = 3
    after(fn, mutate)


def test_getattr_added_to_the_class_later():
    class Plain:
        pass

    obj = Plain()

    def fn(x):
        return x * (getattr(obj, "factor", 2))

    def mutate():
        Plain.__getattr__ = lambda self, name: 5
    after(fn, mutate)


def test_bases_changed():
    class A:
        def apply(self, x):
            return x + 1

    class B:
        def apply(self, x):
            return x - 1

    class C(A):
        pass

    obj = C()

    def mutate():
        C.__bases__ = (B,)
    after(lambda x: obj.apply(x), mutate)


def test_method_replaced_under_a_guard_gate():
    """A model large enough that its module-tree guards are gated: the class guard is gated too (nothing
    per call), and still catches the change."""
    class Act(nn.Module):
        def forward(self, x):
            return x.relu()

    m = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), Act()) for _ in range(4)]).eval()
    src = str(kiln.explain(m, backend="eager")(X).guards[0])
    if gate_functions() is not None:
        head, gated = src.split("if not ___gate_open:", 1)
        assert "class_guards.py" not in head and "class_guards.py" in gated

    def mutate():
        Act.forward = lambda self, x: x.sigmoid()
    with torch.no_grad():
        after(m, mutate)


# ---- what must not recompile ----------------------------------------------------------------------------

def test_a_counter_kept_on_a_class_does_not_recompile():
    class Layer:
        calls = 0

        def apply(self, x):
            return x * 2

    layer = Layer()
    compiled = kiln.compile(lambda x: layer.apply(x), backend="eager")
    before = sum(stats.recompilations.values())
    for _ in range(4):
        Layer.calls += 1  # (plain data kiln never read: not a reason to recompile)
        torch.testing.assert_close(compiled(X), X * 2)
    assert sum(stats.recompilations.values()) == before


def test_a_store_to_the_class_in_the_trace_does_not_recompile():
    class Registry:
        last = None

    def fn(x):
        Registry.last = [1]  # a new list each call, stored by the compiled code
        return x + 1

    compiled = kiln.compile(fn, backend="eager")
    compiled(X)
    before = sum(stats.recompilations.values())
    for _ in range(3):
        torch.testing.assert_close(compiled(X), X + 1)
    assert sum(stats.recompilations.values()) == before and Registry.last == [1]


# ---- the guard itself --------------------------------------------------------------------------------------

def test_class_guard_compares_names_and_objects():
    class Base:
        k = 1

        def f(self):
            return 1

    class Child(Base):
        pass

    guard = ClassGuard([Child], names={"f", "k"})
    assert guard.types == (Child, Base) and guard.same()
    Base.k = 2  # plain data: read through guarded places
    assert guard.same()
    Base.unread = [1]  # a name the trace never looked up
    assert guard.same()
    Base.__bool__ = lambda self: False  # a dunder: always watched
    assert not guard.same()
    del Base.__bool__
    Child.f = Base.f  # a new name: may shadow
    assert not guard.same()
    del Child.f
    assert guard.same()
    Base.f = lambda self: 2
    assert not guard.same()


@pytest.mark.skipif(gate_functions() is None, reason="kiln's C extension is older than guard gates")
def test_the_fast_check_follows_the_type_tags():
    class K:
        def f(self):
            return 1

    unchanged = gate_functions()[0]
    guard = ClassGuard([K], names={"g"})
    guard.state = make_state(guard.types, gate_functions()[2])
    assert not unchanged(guard.state)  # nothing recorded yet
    assert guard.recheck() and unchanged(guard.state)
    K.g = 1
    assert not unchanged(guard.state) and not guard.recheck()
    del K.g
    assert guard.recheck() and unchanged(guard.state)  # the same dicts again: the new tag is recorded


def test_pickling_a_tensor_does_not_recompile():
    # pickle caches a class's slot names in its dict (copyreg._slotnames): kiln's warm cache pickling a
    # tensor added torch.Tensor.__slotnames__, and every frame that had read a tensor attribute recompiled
    import pickle

    torch.Tensor.__dict__.get("__slotnames__") is not None and delattr(torch.Tensor, "__slotnames__")

    def f(x):
        return x * 2 if isinstance(x, torch.Tensor) else x  # (torch.Tensor is a value of the trace: noted)

    kiln.reset()
    stats.reset()
    compiled = kiln.compile(f, backend="eager")
    compiled(X)
    compiled(X)
    pickle.dumps(torch.randn(3))
    assert "__slotnames__" in torch.Tensor.__dict__
    torch.testing.assert_close(compiled(X), f(X))
    assert stats.graphs == 1 and not stats.recompilations
