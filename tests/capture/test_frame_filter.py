"""capture/frame_filter.py: frames that cannot reach a tensor run as they are, without a cache entry."""
import types
import warnings

import torch

import kiln
from kiln.capture.frame_filter import may_use_tensors


def _frame_inputs(fn, *args):
    code = fn.__code__
    return code, dict(zip(code.co_varnames, args)), fn.__globals__, fn.__closure__


class _Finder:
    def find(self, fullname, path=None):
        return fullname.startswith("x") and path is None


def _uses_torch(n):
    return torch.arange(n)


def test_plain_python_frame_is_not_traced():
    assert not may_use_tensors(*_frame_inputs(_Finder.find, _Finder(), "abc", ["p"]))


def test_tensor_module_or_torch_global_is_traced():
    assert may_use_tensors(*_frame_inputs(_Finder.find, _Finder(), torch.ones(1)))
    assert may_use_tensors(*_frame_inputs(_Finder.find, _Finder(), [{"a": (1, torch.ones(1))}]))
    assert may_use_tensors(*_frame_inputs(_Finder.find, torch.nn.Linear(2, 2), "a"))
    assert may_use_tensors(*_frame_inputs(_uses_torch, 3))  # reads the global `torch`


def test_tensor_inside_object_or_closure_is_traced():
    holder = types.SimpleNamespace(inner=types.SimpleNamespace(w=torch.ones(2)))
    assert may_use_tensors(*_frame_inputs(_Finder.find, holder, "a"))
    w = torch.ones(2)

    def closure():
        return w

    assert may_use_tensors(closure.__code__, {}, closure.__globals__, closure.__closure__)


def test_objects_kiln_cannot_look_into_count_as_tensor_free():
    assert not may_use_tensors(*_frame_inputs(_Finder.find, _Finder(), iter([torch.ones(1)])))


def test_import_finder_called_with_many_names_does_not_recompile():
    """A meta-path finder's Python find_spec, run by imports inside a compiled function (the import runs as
    Python between graphs): no cache entries for it, no recompile-limit warning, the same result."""
    import importlib.util
    import sys

    seen = []

    class Finder:
        def find_spec(self, fullname, path=None, target=None):
            if fullname.startswith("kiln_test_missing"):
                seen.append(fullname)
            return None

    def fn(x):
        found = 0
        for i in range(12):
            found += importlib.util.find_spec(f"kiln_test_missing_module_{i}") is None
        return x * found

    sys.meta_path.insert(0, Finder())
    try:
        kiln.reset()
        kiln.stats.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = kiln.compile(fn, backend="eager")(torch.ones(2))
    finally:
        del sys.meta_path[0]
    torch.testing.assert_close(out, torch.full((2,), 12.0))
    snapshot = kiln.stats.snapshot()
    assert len(seen) == 12 and snapshot["frames_without_tensors"] >= 12, snapshot
    assert not snapshot["recompilations"], snapshot["recompilations"]


def test_numpy_arrays_count_as_tensors():
    import numpy as np

    assert may_use_tensors(*_frame_inputs(_Finder.find, _Finder(), np.ones(2)))
    assert may_use_tensors(*_frame_inputs(_Finder.find, _Finder(), {"a": [np.int64(3)]}))


def test_hot_tensor_free_function_is_no_longer_offered():
    """A pure-Python callback that library code (json, run as Python at a graph break) calls many times:
    offered SKIP_AFTER times, then marked skipped, until kiln.reset()."""
    import json

    from kiln.capture import hook
    from kiln.capture.frame_filter import SKIP_AFTER

    def pure(obj):
        return "o"

    def fn(x):
        text = json.dumps([object()] * (3 * SKIP_AFTER), default=pure)
        return x * len(text)

    kiln.reset()
    kiln.stats.reset()
    out = kiln.compile(fn, backend="eager")(torch.ones(2))
    torch.testing.assert_close(out, fn(torch.ones(2)))
    assert kiln.stats.snapshot()["frames_without_tensors"] == SKIP_AFTER  # then not offered again
    assert hook.is_skipped(pure.__code__)
    kiln.reset()
    assert not hook.is_skipped(pure.__code__)


def test_namedtuple_generated_new_is_not_offered():
    import collections

    import torch

    import kiln
    from kiln.capture.skipfiles import is_namedtuple_new

    class P(collections.namedtuple("PBase", ["u", "v"])):  # no __slots__: objects get a __dict__
        pass

    new = P.__new__
    assert is_namedtuple_new(new.__code__, new.__globals__)
    assert not is_namedtuple_new(test_namedtuple_generated_new_is_not_offered.__code__, globals())

    def fn(x):
        return [P(x.neg(), 2), 1]  # rebuilt after the graph by calling P(...): its __new__ just runs

    report = kiln.explain(fn, backend="eager")(torch.ones(2))
    assert report.graph_count == 1 and not report.eager_frames and not report.break_reasons


class _SlotsWithGetattr:
    """A half-built registry (sympy's SingletonRegistry while sympy is imported): no __dict__, and a
    __getattr__ that recurses while its attributes are not set yet."""

    __slots__ = ("_table",)

    def __getattr__(self, name):
        return self._table[name]


class _DictProperty:
    @property
    def __dict__(self):
        raise AssertionError("the frame filter ran a property")


def test_objects_are_looked_into_without_running_their_code():
    assert not may_use_tensors(*_frame_inputs(_Finder.find, _SlotsWithGetattr(), "a"))
    assert not may_use_tensors(*_frame_inputs(_Finder.find, _DictProperty(), "a"))


def test_a_lazily_imported_library_inside_a_compiled_function():
    """torch.utils.checkpoint imports torch._dynamo (and sympy) on its first call; sympy's import ran
    the frame filter on its half-built SingletonRegistry (a RecursionError)."""
    import subprocess
    import sys

    code = ("import torch, kiln\n"
            "from torch.utils.checkpoint import checkpoint\n"
            "lin = torch.nn.Linear(4, 4)\n"
            "f = kiln.compile(lambda x: checkpoint(lin, x, use_reentrant=False) * 2)\n"
            "x = torch.randn(2, 4)\n"
            "torch.testing.assert_close(f(x), lin(x) * 2)\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().endswith("ok"), out.stderr[-2000:]

