"""Unit tests of obj.__dict__ (values/instance_dicts.py): writes are raw attribute stores (no __setattr__
runs), views are live, a write under a data descriptor's name and unknown dict methods break."""
import torch

import kiln


def setup_function():
    kiln.reset()
    kiln.stats.reset()


class Logged:
    def __init__(self):
        self.a = 1

    def __setattr__(self, name, value):
        object.__setattr__(self, "log", getattr(self, "log", ()) + (name,))
        object.__setattr__(self, name, value)


def test_dict_write_bypasses_python_setattr():
    def fn(x, o):
        o.__dict__["b"] = 2
        n = Logged()
        n.__dict__["c"] = x
        return x * o.b, n.log, sorted(vars(n))

    o = Logged()
    out = kiln.compile(fn, backend="eager")(torch.ones(2), o)
    assert out[1:] == (("a",), ["a", "c", "log"]) and o.log == ("a",) and o.b == 2
    assert kiln.stats.graphs == 1 and not kiln.stats.graph_breaks


def test_view_type_and_rebuild():
    def fn(x, o):
        return x + 1, vars(o).items(), vars(Logged()).values()

    _, items, values = kiln.compile(fn, backend="eager")(torch.ones(2), Logged())
    assert type(items).__name__ == "dict_items" and list(items) == [("log", ("a",)), ("a", 1)]
    assert type(values).__name__ == "dict_values" and list(values) == [("a",), 1]
    assert not kiln.stats.graph_breaks


def test_unmodelled_dict_methods_and_descriptor_names_break():
    class P:
        @property
        def p(self):
            return 1

    def pop(x, o):
        o.__dict__.pop("a")
        return x + 1

    def store(x):
        n = P()
        n.__dict__["p"] = 2
        return x + n.p

    for fn, make in ((pop, lambda: (torch.ones(2), Logged())), (store, lambda: (torch.ones(2),))):
        assert torch.equal(kiln.compile(fn, backend="eager")(*make()), fn(*make()))
    reasons = " | ".join(kiln.stats.graph_breaks) + " | ".join(kiln.stats.eager_fallbacks)
    assert "__dict__.pop" in reasons and "data descriptor" in reasons
