"""Unit tests of types.SimpleNamespace (values/namespaces.py): generic attribute access on an existing
namespace (guarded, written back), one made while tracing (rebuilt with its attributes, once), and the C
methods that break (==, repr) instead of being guessed."""
import types

import torch

import kiln
from kiln.capture.values.namespaces import NamespaceValue, rebuild_namespace
from kiln.capture.values.objects import has_generic_delattr, has_generic_getattribute, has_generic_setattr

SN = types.SimpleNamespace


def setup_function():
    kiln.reset()
    kiln.stats.reset()


def test_simplenamespace_access_is_generic():
    class Sub(SN):
        def __getattribute__(self, name):
            return 1

    assert has_generic_getattribute(SN) and has_generic_setattr(SN) and has_generic_delattr(SN)
    assert not has_generic_getattribute(Sub)


def test_rebuild_keeps_attribute_order():
    ns = rebuild_namespace({"b": 1, "a": 2})
    assert type(ns) is SN and list(vars(ns)) == ["b", "a"]
    assert list(NamespaceValue({"x": None, "y": None}).attrs) == ["x", "y"]


def test_existing_namespace_read_guarded_and_written_back():
    def fn(x, cfg):
        cfg.calls = getattr(cfg, "calls", 0) + 1
        return x * cfg.scale

    compiled = kiln.compile(fn, backend="eager")
    cfg = SN(scale=2.0)
    assert torch.equal(compiled(torch.ones(2), cfg), torch.full((2,), 2.0)) and cfg.calls == 1
    cfg.scale = 3.0  # the guard on cfg.scale fails: traced again
    assert torch.equal(compiled(torch.ones(2), cfg), torch.full((2,), 3.0)) and cfg.calls == 2
    assert kiln.stats.graphs == 2 and not kiln.stats.graph_breaks


def test_new_namespace_rebuilt_once_with_its_attributes():
    def fn(x):
        ns = SN(a=x + 1, tag="t")
        ns.b = [ns.a]
        del ns.tag
        return ns, ns.b

    ns, b = kiln.compile(fn, backend="eager")(torch.zeros(2))
    assert type(ns) is SN and list(vars(ns)) == ["a", "b"] and ns.b is b and b[0] is ns.a
    assert kiln.stats.graphs == 1 and not kiln.stats.graph_breaks


def test_c_methods_break_and_positional_args_raise():
    def fn(x):
        a, b = SN(p=1), SN(p=1)
        try:
            SN({"p": 1})
        except TypeError as e:
            msg = str(e)
        return x + 1, a == b, repr(a), msg

    out = kiln.compile(fn, backend="eager")(torch.zeros(2))
    assert out[1:] == (True, "namespace(p=1)", "no positional arguments expected")
    reasons = " ".join(kiln.stats.graph_breaks)
    assert "operator eq" in reasons and "repr" in reasons
