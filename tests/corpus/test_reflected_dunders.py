"""Arithmetic on user objects in CPython's order: reflected methods (`__radd__`, ...) when the left operand
is a builtin (int, float, tensor), a subclass's reflected method first when it overrides it,
NotImplemented falling through to the other side, `__iadd__` before `__add__`, and the TypeError when
every method declines."""
import torch

from .harness import check, dynamo_bug


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class Num:
    def __init__(self, v, log):
        self.v, self.log = v, log

    def __add__(self, other):
        self.log.append(f"{type(self).__name__}.add")
        if isinstance(other, Num):
            return type(self)(self.v + other.v, self.log)
        if isinstance(other, (int, float, torch.Tensor)):
            return type(self)(self.v + other, self.log)
        return NotImplemented

    def __radd__(self, other):
        self.log.append(f"{type(self).__name__}.radd")
        if isinstance(other, (int, float, torch.Tensor)):
            return type(self)(other + self.v, self.log)
        return NotImplemented

    def __rmul__(self, other):
        self.log.append(f"{type(self).__name__}.rmul")
        return type(self)(self.v * other, self.log)

    def __rsub__(self, other):
        self.log.append(f"{type(self).__name__}.rsub")
        return type(self)(other - self.v, self.log)

    def __rtruediv__(self, other):
        return type(self)(other / self.v, self.log)

    def __rpow__(self, other):
        return type(self)(other ** self.v, self.log)


class SubOverriding(Num):
    def __radd__(self, other):
        self.log.append("SubOverriding.radd")
        return SubOverriding(other.v * 10 + self.v, self.log) if isinstance(other, Num) else NotImplemented


class SubPlain(Num):
    pass


class Declines:
    def __init__(self, log):
        self.log = log

    def __add__(self, other):
        self.log.append("Declines.add")
        return NotImplemented


class Acc:
    def __init__(self, v):
        self.v = v

    def __iadd__(self, other):
        self.v = self.v + other
        return self

    def __add__(self, other):
        return Acc(self.v + other * 100)


class NoIadd:
    def __init__(self, v):
        self.v = v

    def __iadd__(self, other):
        return NotImplemented

    def __add__(self, other):
        return NoIadd(self.v + other)


def test_builtin_left_operands_use_reflected_methods():
    def fn(x):
        log = []
        n = Num(x, log)
        a = 3 + n
        b = 2.5 * n
        c = 1 - n
        d = 2 / Num(x.abs() + 1, log)
        e = 2 ** Num(2, log)
        f = x + n  # Tensor.__add__ declines a Python object: n.__radd__(x)
        return a.v, b.v, c.v, d.v, e.v, f.v, log

    check(fn, _t(3), dynamo_graphs=2)


def test_subclass_reflected_method_first_only_when_it_overrides():
    def fn(x):
        log = []
        r1 = Num(x, log) + SubOverriding(x * 2, log)  # SubOverriding.__radd__ first
        r2 = Num(x, log) + SubPlain(x * 2, log)  # no override: Num.__add__ first
        return r1.v, type(r1).__name__, r2.v, type(r2).__name__, log

    check(fn, _t(3))


def test_not_implemented_falls_through_to_the_other_side_and_then_typeerror():
    def fn(x):
        log = []
        r = Declines(log) + Num(x, log)  # Declines.__add__ -> NotImplemented -> Num.__radd__ -> NotImplemented
        return r, log

    def caught(x):
        log = []
        try:
            Declines(log) + Num(x, log)
        except TypeError as e:
            return x * 2, log, str(e)
        return x, log, ""

    check(caught, _t(3))


def test_iadd_before_add_and_fallback_when_it_declines():
    def fn(x):
        a = Acc(x)
        alias = a
        a += 1
        b = NoIadd(x)
        alias_b = b
        b += 1  # __iadd__ declines: b = b.__add__(1), a new object
        return a.v, alias is a, b.v, alias_b is b, alias_b.v

    check(fn, _t(3))


def test_sum_of_user_objects_with_start_and_radd():
    def fn(x):
        log = []
        objs = [Num(x, log), Num(x * 2, log), Num(x * 3, log)]
        return sum(objs).v, sum(objs, 1.5).v, log

    check(fn, _t(3))
