"""Writes through `obj.__dict__`, live views of it, and user descriptors (found while fixing the fourth
round of fresh cases): before, `obj.__dict__[k] = v` was dropped (a wrong result on an existing object,
an AttributeError on a new one) and `vars(obj).keys()` was a one-shot snapshot iterator."""
import torch

from .harness import check, dynamo_bug


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class _Plain:
    def __init__(self):
        self.a = 1


@dynamo_bug('vars() of an object made in the graph is empty')
def test_dict_setitem_on_new_object():
    def fn(x):
        c = _Plain()
        c.__dict__["a"] = 5
        c.__dict__["b"] = x
        return x * c.a, c.b, vars(c)

    check(fn, _t(2))


def test_dict_setitem_on_existing_object():
    def fn(x, c):
        c.__dict__["a"] = 5
        return x * c.a, vars(c)

    check(fn, _t(2), _Plain(), inputs_mutated=True)


@dynamo_bug('vars() of an object made in the graph is empty')
def test_dict_update_and_delitem():
    def fn(x, c):
        n = _Plain()
        for o in (n, c):
            o.__dict__.update({"q": x}, r=2)
            del o.__dict__["a"]
        return n.q * n.r, vars(n), hasattr(c, "a"), c.q + 1

    check(fn, _t(2), _Plain(), inputs_mutated=True)


@dynamo_bug('a keys view of vars(obj) does not see a later store')
def test_vars_views_are_live_and_reiterable():
    def fn(x, c):
        n = _Plain()
        ks = vars(c).keys()
        it = vars(n).items()
        first, again = list(ks), list(ks)
        c.z = 2
        n.w = x
        return x, first, again, list(ks), len(ks), "z" in ks, [k for k, _ in it], sum(v for k, v in it if k == "w")

    check(fn, _t(2), _Plain(), inputs_mutated=True)


@dynamo_bug('vars() of an object made in the graph is empty')
def test_dict_write_of_a_data_descriptor_name_breaks():
    class Doubled:
        def __set_name__(self, owner, name):
            self.name = name

        def __get__(self, obj, objtype=None):
            return self if obj is None else obj.__dict__[self.name] * 2

        def __set__(self, obj, value):
            obj.__dict__[self.name] = value

    class C:
        v = Doubled()

        def __init__(self, v):
            self.v = v

    def fn(x):
        c = C(3)
        c.v = c.v + 1
        return x * c.v, vars(c)

    check(fn, _t(2), breaks=2)  # (breaks where __set__ writes the instance dict under its own name)


class _Clamped:
    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def __set_name__(self, owner, name):
        self.private = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return getattr(obj, self.private)

    def __set__(self, obj, value):
        setattr(obj, self.private, min(max(value, self.lo), self.hi))


class _Cached:
    """A non-data descriptor: an instance attribute of the same name wins over it."""

    def __get__(self, obj, objtype=None):
        return 10 if obj is not None else self


class _Opts:
    p = _Clamped(0.0, 1.0)
    k = _Cached()

    def __init__(self, p):
        self.p = p


def test_user_data_and_nondata_descriptors():
    def fn(x, existing):
        o = _Opts(1.5)
        a = x * o.p + o.k
        o.__dict__["k"] = 5
        existing.p = -3.0
        return a, o.k, existing.p, existing._p, o._p

    check(fn, _t(2), _Opts(0.5), inputs_mutated=True)
