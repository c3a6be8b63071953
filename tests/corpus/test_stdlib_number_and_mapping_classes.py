"""Pure-Python classes of the standard library traced like user code (capture/skipfiles.py):
collections.ChainMap's methods, fractions.Fraction and numbers' mixins; and the protocols they lean on:
float()/int() of a Python object (__float__, __int__, __index__), round(obj[, n]) (__round__), and
dict(m) / d.update(m) of an object with keys() (m.keys() listed first, then m[key] per key)."""
import collections
import fractions

import torch

from .harness import check, dynamo_bug
from .test_fresh7_followups import _t


def test_chainmap_writes_go_to_the_first_map_and_new_child_shadows():
    def fn(x):
        base = {"a": 1}
        cm = collections.ChainMap({}, base)
        cm["z"] = 5
        child = cm.new_child({"a": 10})
        return x * child["a"] + len(child) + ("z" in child) + cm.get("q", 4), dict(child), list(cm.keys()), base

    check(fn, _t(3), graphs=1, breaks=0)


def test_chainmap_over_an_argument_dict_is_the_same_dict():
    def fn(x, d):
        cm = collections.ChainMap(d, {"k": 2})
        cm["new"] = 1
        if "k" in cm.maps[0]:
            del cm["k"]
        return x * cm["k"], cm.maps[0] is d, cm.parents.maps

    check(fn, _t(3), {"k": 7}, graphs=1, breaks=0, inputs_mutated=True)


def test_chainmap_missing_key_raises_key_error():
    def fn(x):
        cm = collections.ChainMap({"a": 1}, {"b": 2})
        try:
            return x * cm["c"]
        except KeyError as e:
            return x + cm["b"], e.args

    check(fn, _t(3), graphs=1, breaks=0)


def test_chainmap_returned_to_the_caller():
    def fn(x):
        cm = collections.ChainMap({"t": x * 2})
        cm["n"] = 3
        return cm

    check(fn, _t(3), graphs=1, breaks=0)


def test_fraction_arithmetic_comparisons_and_rounding():
    def fn(x):
        a = fractions.Fraction(1, 3)
        b = a * 3 - fractions.Fraction(1, 2)
        return x * float(b), b, a < b, a == fractions.Fraction(2, 6), str(b), int(b), round(b, 2), round(a)

    check(fn, _t(3), graphs=1, breaks=0)


def test_fraction_from_an_int_argument_and_limit_denominator():
    def fn(x, n):
        fr = fractions.Fraction(n, 7) + 1
        return x * float(fr.limit_denominator(3)), fr.numerator, fr.denominator

    check(fn, _t(3), 5, graphs=1, breaks=0)


def test_float_int_of_objects_with_number_methods():
    class Half:
        def __float__(self):
            return 0.5

    class Three:
        def __index__(self):
            return 3

    def fn(x):
        return x * float(Half()) + int(Three()) + float(Three())

    check(fn, _t(3), graphs=1, breaks=0)


@dynamo_bug("its TypeError message lacks the class name ('__float__ returned non-float')", strict=False)
def test_float_of_an_object_returning_a_non_float_raises_type_error():
    class Bad:
        def __float__(self):
            return "no"

    class BadIndex:
        def __index__(self):
            return 1.5

    class Plain:
        pass

    def fn(x):
        messages = []
        for make, kind in ((Bad, float), (BadIndex, int), (Plain, float), (Plain, int)):
            try:
                kind(make())
            except TypeError as e:
                messages.append(str(e))
        return x + len(messages), messages

    check(fn, _t(3), graphs=1, breaks=0)


def test_round_of_an_object_with_and_without_round():
    class Money:
        def __init__(self, v):
            self.v = v

        def __round__(self, n=None):
            return ("rounded", n)

    class Plain:
        pass

    def fn(x):
        try:
            round(Plain())
        except TypeError as e:
            err = str(e)
        return x * 2, round(Money(1.5)), round(Money(1.5), 1), round(Money(1), None), err

    check(fn, _t(3), graphs=1, breaks=0, dynamo_graphs=0)  # (TorchDynamo runs the frame eagerly)


@dynamo_bug("dict.update(mapping) reads the mapping one key fewer times than CPython (the log differs)", strict=False)
def test_dict_of_a_user_mapping_lists_keys_first():
    class Logged(collections.abc.Mapping):
        def __init__(self, log):
            self.log = log

        def __getitem__(self, k):
            self.log.append(("get", k))
            return k * 2

        def __iter__(self):
            return iter([1, 2])

        def __len__(self):
            return 2

        def keys(self):
            self.log.append("keys")
            return [1, 2]

    def fn(x):
        log = []
        d = dict(Logged(log))
        e = {0: 0}
        e.update(Logged(log))
        return x * len(d), d, e, log

    check(fn, _t(3), graphs=1, breaks=0)


def test_tensor_values_in_a_chainmap():
    def fn(x):
        cm = collections.ChainMap({"w": x}, {"w": torch.ones(3), "b": x + 1})
        return cm["w"] * cm["b"], sorted(cm)

    check(fn, _t(3), graphs=1, breaks=0)
