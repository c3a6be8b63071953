"""Attributes read through a class whose metaclass is a Python class, and changes to the metaclass after
compiling: the compiled function must recompile or read the new value, as eager does.

A lookup on a class asks the metaclass first: a data descriptor there (a property) wins over the class's
own attributes, classmethods and staticmethods included, and the metaclass's ``__call__`` makes the
instances. Before, the class guards did not watch metaclasses (a property or ``__call__`` added to one
after compiling ran the old graph: wrong results), and a traced ``cls.name`` took the class's own
classmethod/staticmethod over a metaclass property."""
import types

from .harness import CountingBackend, assert_same, check, compile_fn, dynamo_bug, reset
from .test_fresh7_followups import _t


_DYNAMO_STALE = "a metaclass changed after compiling: the old graph runs (torch 2.13)"


def _same_after_change(make, calls=3):
    """``make()`` gives (fn, change): a function over fresh classes and a callable changing them. Eager and
    compiled each get their own; ``change()`` runs before the last call, and results must agree call by call."""
    eager_fn, eager_change = make()
    expected = [eager_fn(_t(2)) for _ in range(calls - 1)]
    eager_change()
    expected.append(eager_fn(_t(2)))
    reset()
    comp_fn, comp_change = make()
    compiled = compile_fn(comp_fn, CountingBackend())
    got = [compiled(_t(2)) for _ in range(calls - 1)]
    comp_change()
    got.append(compiled(_t(2)))
    assert_same(got, expected, path="results per call")


@dynamo_bug(_DYNAMO_STALE, strict=False)
def test_metaclass_plain_attribute_read_through_the_class():
    def make():
        class Meta(type):
            scale = 2

        class A(metaclass=Meta):
            pass

        return (lambda x: x * A.scale), (lambda: setattr(Meta, "scale", 5))

    _same_after_change(make)


def test_metaclass_attribute_read_through_a_subclass_and_type_of_an_object():
    def make():
        class Meta(type):
            scale = 2

        class A(metaclass=Meta):
            pass

        class B(A):
            pass

        b = B()
        return (lambda x: x * B.scale + type(b).scale), (lambda: setattr(Meta, "scale", 7))

    _same_after_change(make)


@dynamo_bug(_DYNAMO_STALE, strict=False)
def test_metaclass_method_called_through_the_class():
    def make():
        class Meta(type):
            def factor(cls):
                return 4

        class A(metaclass=Meta):
            pass

        return (lambda x: x * A.factor()), (lambda: setattr(Meta, "factor", lambda cls: 9))

    _same_after_change(make)


def test_metaclass_property_replaced():
    def make():
        class Meta(type):
            @property
            def size(cls):
                return cls._size

        class A(metaclass=Meta):
            _size = 3

        return (lambda x: x * A.size), (lambda: setattr(Meta, "size", property(lambda cls: 10)))

    _same_after_change(make)


@dynamo_bug(_DYNAMO_STALE, strict=False)
def test_metaclass_property_added_over_a_classmethod():
    def make():
        class Meta(type):
            pass

        class A(metaclass=Meta):
            @classmethod
            def f(cls):
                return 3

        return (lambda x: x * A.f()), (lambda: setattr(Meta, "f", property(lambda cls: (lambda: 7))))

    _same_after_change(make)


@dynamo_bug(_DYNAMO_STALE, strict=False)
def test_metaclass_property_added_over_a_staticmethod():
    def make():
        class Meta(type):
            pass

        class A(metaclass=Meta):
            @staticmethod
            def f():
                return 3

        return (lambda x: x * A.f()), (lambda: setattr(Meta, "f", property(lambda cls: (lambda: 7))))

    _same_after_change(make)


@dynamo_bug(_DYNAMO_STALE, strict=False)
def test_metaclass_call_added_after_compiling():
    def make():
        class Meta(type):
            pass

        class A(metaclass=Meta):
            def __init__(self):
                self.a = 1

        return (lambda x: x * A().a), (lambda: setattr(Meta, "__call__", lambda cls: types.SimpleNamespace(a=5)))

    _same_after_change(make)


def test_metaclass_property_wins_over_the_class_attribute():
    class Meta(type):
        @property
        def f(cls):
            return lambda: 5

    class A(metaclass=Meta):
        @classmethod
        def f(cls):
            return 3

    def fn(x):
        return x * A.f()

    check(fn, _t(3), graphs=1)
