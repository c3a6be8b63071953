"""Exceptions raised and caught inside traced code (an `except` in an inlined function, getattr with a
default, hasattr, collections.abc.Sequence iteration ending on IndexError) and objects of classes with a
metaclass (abc.ABC) made while tracing: one graph, eager's results. An exception that leaves the traced
code breaks the graph before the root statement that raises it, which runs as Python."""
import abc
from collections.abc import Sequence

import pytest
import torch

from .support import CountingBackend, check_breaks, compile_fn, reset, t


class _Base(abc.ABC):
    @abc.abstractmethod
    def scale(self): ...


class _Layer(_Base):
    def __init__(self, k):
        self.k = k

    def scale(self):
        return self.k


class _View(Sequence):  # Sequence.__iter__: a generator over self[i] until IndexError
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i < 0:
            i += len(self)
        if i < 0 or i >= len(self):
            raise IndexError("list index out of range")
        return i + 1


class _Config:
    def __init__(self):
        self.hidden = 3


class _GuardedConfig(_Config):
    def __getattribute__(self, key):  # a Python __getattribute__, as transformers' configs have
        if key == "size":
            key = "hidden"
        return super().__getattribute__(key)


CONFIG = _Config()
GUARDED = _GuardedConfig()


def test_abc_instances_made_while_tracing():
    def fn(x):
        layers = [_Layer(i + 1) for i in range(3)]
        for layer in layers:
            x = x * layer.scale()
        return x, layers[1], isinstance(layers[0], _Base)

    check_breaks(fn, t(3), graphs=1, breaks=0, post=lambda out: (out[0], out[1].k, out[2]))


def test_sequence_iteration_ends_on_index_error():
    def fn(x):
        view = _View(3)
        for i in view:
            x = x * i + 1
        return x, len(view), list(_View(2))

    check_breaks(fn, t(3), graphs=1, breaks=0)


def test_except_in_inlined_function():
    def lookup(view, i):
        try:
            return view[i]
        except (KeyError, IndexError):
            return -1
        finally:
            pass

    def fn(x):
        view = _View(2)
        return x * lookup(view, 1) + lookup(view, 5)

    check_breaks(fn, t(3), graphs=1, breaks=0)


def test_getattr_default_and_hasattr_on_existing_objects():
    def fn(x):
        a = getattr(CONFIG, "missing", 5) + getattr(CONFIG, "hidden", 7)
        b = getattr(GUARDED, "missing", 11) + GUARDED.size + getattr(GUARDED, "size", 0)
        return x * a + b + hasattr(GUARDED, "nope") + hasattr(GUARDED, "hidden") + hasattr(_Layer(1), "k")

    check_breaks(fn, t(3), graphs=1, breaks=0)


def test_missing_attribute_set_later_recompiles():
    def fn(x):
        return x + getattr(GUARDED, "extra", 1) + hasattr(CONFIG, "extra")

    reset()
    backend = CountingBackend()
    compiled = compile_fn(fn, backend)
    x = t(3)
    torch.testing.assert_close(compiled(x), fn(x))
    assert len(backend.graphs) == 1
    GUARDED.extra, CONFIG.extra = 10, 1
    try:
        torch.testing.assert_close(compiled(x), fn(x))
    finally:
        del GUARDED.extra, CONFIG.extra
    torch.testing.assert_close(compiled(x), fn(x))
    assert len(backend.graphs) == 2


def test_exception_leaving_traced_code_is_raised_by_python():
    def helper(view):
        return view[7]

    def fn(x):
        y = x * 2
        return y + helper(_View(2))

    reset()
    compiled = compile_fn(fn, CountingBackend())
    with pytest.raises(IndexError, match="out of range"):
        compiled(t(3))


def test_abstract_class_is_not_instantiated():
    class Abstract(abc.ABC):
        @abc.abstractmethod
        def f(self): ...

    def fn(x):
        return x + 1, Abstract()

    reset()
    compiled = compile_fn(fn, CountingBackend())
    with pytest.raises(TypeError, match="abstract"):
        compiled(t(3))


def test_uncaught_exception_in_except_block_reraises():
    def helper(view):
        try:
            return view[9]
        except KeyError:
            return 0

    def fn(x):
        return x + helper(_View(1))

    reset()
    compiled = compile_fn(fn, CountingBackend())
    with pytest.raises(IndexError):
        compiled(t(3))


class _Registry(dict):  # transformers' _CanRecordRegistry: a dict subclass reaching dict's C get
    def __setitem__(self, model, value):
        super().__setitem__(str(model.__class__), value)

    def get(self, model):
        return super().get(str(model.__class__)) or {}

    def has(self, model):
        return super().__contains__(str(model.__class__))


REGISTRY = _Registry()


def test_super_get_of_an_existing_dict_subclass():
    REGISTRY.clear()
    REGISTRY[_Config()] = {"scale": 3}

    def fn(x):
        found = REGISTRY.get(_Config())
        missing = REGISTRY.get(_Layer(1))
        return x * found["scale"] + len(missing) + REGISTRY.has(_Config())

    check_breaks(fn, t(3), graphs=1, breaks=0)


def test_super_get_of_an_existing_dict_subclass_follows_changes():
    REGISTRY.clear()

    def fn(x):
        return x * REGISTRY.get(_Config()).get("scale", 1)

    reset()
    backend = CountingBackend()
    compiled = compile_fn(fn, backend)
    x = t(3)
    torch.testing.assert_close(compiled(x), fn(x))
    REGISTRY[_Config()] = {"scale": 3}
    torch.testing.assert_close(compiled(x), fn(x))
    REGISTRY[_Layer(1)] = {}  # another key: no recompile
    torch.testing.assert_close(compiled(x), fn(x))
    assert len(backend.graphs) == 2
    REGISTRY.clear()


class _Rotary(torch.nn.Module):
    @torch.no_grad()
    def forward(self, x):
        return x * 2


class _WithRotary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = _Rotary()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        r = self.rotary(y)
        return y + r, r.requires_grad, torch.is_grad_enabled()


def test_no_grad_decorated_method_is_traced():
    check_breaks(_WithRotary(), t(2, 3, requires_grad=True), graphs=1, breaks=0)


@torch.enable_grad()
def _with_grad(x):
    return x * 3, torch.is_grad_enabled()


def test_enable_grad_decorated_function_under_no_grad():
    def fn(x):
        with torch.no_grad():
            y, enabled = _with_grad(x)
        return y, y.requires_grad, enabled, torch.is_grad_enabled()

    check_breaks(fn, t(3, requires_grad=True), graphs=1, breaks=0)


def test_environ_reads_are_guarded():
    import os

    def fn(x):
        flag = os.environ.get("KILN_TEST_FLAG", "0") == "1"
        return x * (2 if flag else 3), "KILN_TEST_FLAG" in os.environ

    os.environ.pop("KILN_TEST_FLAG", None)
    check_breaks(fn, t(3), graphs=1, breaks=0)
    reset()
    backend = CountingBackend()
    compiled = compile_fn(fn, backend)
    x = t(3)
    try:
        for value in (None, "1", "0", "1"):
            if value is not None:
                os.environ["KILN_TEST_FLAG"] = value
            torch.testing.assert_close(compiled(x), fn(x))
    finally:
        os.environ.pop("KILN_TEST_FLAG", None)
    assert len(backend.graphs) == 3


import functools  # noqa: E402
import logging  # noqa: E402


@functools.lru_cache(None)
def _warning_once(self, *args, **kwargs):  # transformers.utils.logging's warning_once
    self.warning(*args, **kwargs)


logging.Logger.kiln_test_warning_once = _warning_once
_LOG = logging.getLogger("kiln.tests.once")
_SEEN: list = []
LEVEL = 0


class _Collect(logging.Handler):
    def emit(self, record):
        _SEEN.append((record.getMessage(), LEVEL))


_LOG.addHandler(_Collect())
_LOG.propagate = False


def _reset_log():
    global LEVEL
    _warning_once.cache_clear()
    _SEEN.clear()
    LEVEL = 0


def test_warning_once_is_a_deferred_call():
    def fn(x):
        global LEVEL
        y = x * 2
        LEVEL = 1
        _LOG.kiln_test_warning_once("first")  # the handler sees LEVEL == 1, as in eager
        _LOG.kiln_test_warning_once("first")
        return y + 1

    check_breaks(fn, t(3), graphs=1, breaks=0, setup=_reset_log, observe=lambda: (list(_SEEN), LEVEL))


def test_write_after_warning_once_to_a_place_written_before_breaks():
    def fn(x):
        global LEVEL
        LEVEL = 1
        _LOG.kiln_test_warning_once("second")
        LEVEL = 2  # replayed after the call it would hide LEVEL == 1 from the handler
        return x + LEVEL

    check_breaks(fn, t(3), graphs=1, breaks=1, setup=_reset_log, observe=lambda: (list(_SEEN), LEVEL))
