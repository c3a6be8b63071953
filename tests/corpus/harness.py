"""Harness of the Python-semantics corpus: run a case eagerly and under kiln.compile, compare.

    from .harness import check
    def test_add():
        def fn(x, y):
            return x + y * 2
        check(fn, torch.randn(3), torch.randn(3), graphs=1)

``check`` resets kiln, runs ``fn`` eagerly and compiled (each call on fresh deep copies of the
arguments, and of ``fn`` itself when it is an ``nn.Module``), compares outputs, the arguments after
each call (mutation) and module state, and asserts how many FX graphs the backend was handed. A kiln
internal error (kiln then runs the frame eagerly, with a warning) fails the case: a graph may have
reached the backend before it, so the count alone would not show it. The
compiled function is called ``calls`` times; calls after the first must hit the cache (no new graph).

Reference engine: ``KILN_CORPUS_ENGINE=dynamo python -m pytest tests/corpus`` runs every case under
``torch.compile`` (TorchDynamo) instead of kiln, to check that the corpus' expectations are what
PyTorch's own capture does. Cases where this version of kiln (no graph breaks: a frame it cannot
capture runs wholly eagerly) and dynamo (graph breaks, resume functions) differ say so with
``dynamo_graphs=``. This switch belongs to the tests only; kiln itself never calls dynamo.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import json
import math
import os
import types
import warnings
from typing import Any, Callable, Iterable, Sequence

import torch

ENGINE = os.environ.get("KILN_CORPUS_ENGINE", "kiln")
USE_DYNAMO = ENGINE == "dynamo"

if not USE_DYNAMO:
    import kiln
    import kiln.errors


def dynamo_bug(reason: str, strict: bool = True):
    """Mark a case that TorchDynamo (the reference engine) gets wrong; kiln must still pass it.

    strict=False where only some torch versions get it wrong.
    """
    import pytest

    return pytest.mark.xfail(USE_DYNAMO, reason=f"dynamo reference: {reason}", strict=strict)


def kiln_ready() -> bool:
    """True once kiln's public compile() exists (or when the corpus runs against dynamo)."""
    if USE_DYNAMO:
        return True
    if not hasattr(kiln, "compile"):
        return False
    try:  # without the C frame hook (extension not built) kiln cannot capture anything
        from kiln.capture import hook
    except ImportError:
        return True
    return bool(getattr(hook, "available", lambda: True)())


# ----------------------------------------------------------------------------------------------
# backend and engine
# ----------------------------------------------------------------------------------------------


class CountingBackend:
    """A backend that records every FX graph it is handed and runs it as it is (so, like kiln's "eager"
    backend, it runs graphs with symbolic sizes for every size: ``kiln_dynamic``)."""

    kiln_dynamic = True

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        assert isinstance(gm, torch.fx.GraphModule), f"backend got {type(gm).__name__}, not a GraphModule"
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    def op_count(self, index: int = 0) -> int:
        """Number of call_function/call_method/call_module nodes of graph ``index``."""
        return sum(1 for n in self.graphs[index].graph.nodes
                   if n.op in ("call_function", "call_method", "call_module"))

    def targets(self, index: int = 0) -> list:
        return [n.target for n in self.graphs[index].graph.nodes
                if n.op in ("call_function", "call_method", "call_module")]


def reset() -> None:
    if USE_DYNAMO:
        torch._dynamo.reset()
        return
    kiln.reset()
    stats = getattr(kiln, "stats", None)
    if stats is not None and hasattr(stats, "reset"):
        stats.reset()


def compile_fn(fn, backend, *, fullgraph: bool = False, dynamic=None):
    if USE_DYNAMO:
        return torch.compile(fn, backend=backend, fullgraph=fullgraph, dynamic=dynamic)
    return kiln.compile(fn, backend=backend, fullgraph=fullgraph, dynamic=dynamic)


def graph_break_error_types() -> tuple:
    if USE_DYNAMO:
        import torch._dynamo.exc as exc

        return (exc.Unsupported, exc.UserError, exc.TorchRuntimeError)
    return (kiln.errors.GraphBreakError,)


# ----------------------------------------------------------------------------------------------
# copying and comparing
# ----------------------------------------------------------------------------------------------


def clone_args(value: Any, modules: dict | None = None) -> Any:
    """Deep copy: tensors cloned (aliasing between arguments is kept), modules deep-copied.

    modules: a dict kept by the caller across calls, id(original module) -> its copy, so that a
    module passed as an argument is copied once per side (eager / compiled) and then passed as
    that same object on every call, as real code does (fresh objects would test guards on
    identity, which is not the point of a case).
    """
    if modules is None:
        return copy.deepcopy(value)
    memo: dict = {}
    for mod in find_instances(value):
        if id(mod) not in modules:
            modules[id(mod)] = (mod, copy.deepcopy(mod))
        memo[id(mod)] = modules[id(mod)][1]
    return copy.deepcopy(value, memo)


def find_instances(value: Any, kinds: tuple = (torch.nn.Module,), depth: int = 0) -> list:
    """Objects of `kinds` in (nested lists, tuples and dict values of) `value`, four levels deep."""
    if isinstance(value, kinds):
        return [value]
    if depth > 4:
        return []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in find_instances(v, kinds, depth + 1)]
    return []


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def assert_same(actual: Any, expected: Any, *, rtol=None, atol=None, path: str = "out") -> None:
    """Compare ``actual`` (compiled) with ``expected`` (eager), recursively and type-exactly."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a Tensor, got {type(actual).__name__}"
        assert type(actual) is type(expected), f"{path}: {type(actual).__name__} != {type(expected).__name__}"
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m: f"{path}: {m}")
        assert actual.requires_grad == expected.requires_grad, (
            f"{path}: requires_grad {actual.requires_grad} != {expected.requires_grad}")
        assert actual.is_inference() == expected.is_inference(), (
            f"{path}: is_inference() {actual.is_inference()} != {expected.is_inference()}")
        return
    if type(expected).__module__ == "numpy" and hasattr(expected, "dtype"):  # ndarray or NumPy scalar
        _assert_same_numpy(actual, expected, rtol=rtol, atol=atol, path=path)
        return
    if isinstance(expected, torch.nn.Module):
        assert type(actual) is type(expected), f"{path}: {type(actual).__name__} != {type(expected).__name__}"
        assert_same(actual.state_dict(), expected.state_dict(), rtol=rtol, atol=atol, path=f"{path}.state_dict()")
        assert actual.training == expected.training, f"{path}.training differs"
        return
    assert type(actual) is type(expected), (
        f"{path}: type {type(actual).__name__} != expected {type(expected).__name__} ({actual!r} vs {expected!r})")
    if _is_namedtuple(expected) or isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        if isinstance(expected, torch.Size):
            assert actual == expected, f"{path}: {actual} != {expected}"
            return
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, rtol=rtol, atol=atol, path=f"{path}[{i}]")
        return
    if isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys()), (
            f"{path}: dict keys (in order) {list(actual.keys())} != {list(expected.keys())}")
        for k in expected:
            assert_same(actual[k], expected[k], rtol=rtol, atol=atol, path=f"{path}[{k!r}]")
        return
    if isinstance(expected, (set, frozenset)):
        assert actual == expected, f"{path}: {actual} != {expected}"
        return
    if isinstance(expected, float):
        assert actual == expected or (math.isnan(actual) and math.isnan(expected)), (
            f"{path}: {actual!r} != {expected!r}")
        return
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        for f in dataclasses.fields(expected):
            assert_same(getattr(actual, f.name), getattr(expected, f.name), rtol=rtol, atol=atol,
                        path=f"{path}.{f.name}")
        return
    if expected is None or isinstance(expected, (bool, int, str, bytes, complex, torch.dtype, torch.device,
                                                 type, range, slice)):
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
        return
    if isinstance(expected, _PLAIN_CALLABLES) or inspect.ismodule(expected):
        assert actual is expected or actual == expected, f"{path}: {actual!r} != {expected!r}"
        return
    if hasattr(expected, "__dict__"):
        assert_same(vars(actual), vars(expected), rtol=rtol, atol=atol, path=f"{path}.__dict__")
        return
    slots = [s for klass in type(expected).__mro__ for s in getattr(klass, "__slots__", ())]
    if slots:
        for s in slots:
            assert hasattr(actual, s) == hasattr(expected, s), f"{path}.{s}: set on one side only"
            if hasattr(expected, s):
                assert_same(getattr(actual, s), getattr(expected, s), rtol=rtol, atol=atol, path=f"{path}.{s}")
        return
    assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _assert_same_numpy(actual: Any, expected: Any, *, rtol, atol, path: str) -> None:
    """NumPy arrays and scalars: exact type, dtype and shape; values as assert_close compares tensors."""
    import numpy as np

    assert type(actual) is type(expected), f"{path}: type {type(actual).__name__} != {type(expected).__name__}"
    assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
    assert np.shape(actual) == np.shape(expected), f"{path}: shape {np.shape(actual)} != {np.shape(expected)}"
    torch.testing.assert_close(torch.from_numpy(np.array(actual)), torch.from_numpy(np.array(expected)),
                               rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{path}: {m}")


_PLAIN_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial,
                    types.BuiltinMethodType)


def _changed(before: Any, after: Any) -> bool:
    try:
        assert_same(after, before, rtol=0, atol=0)
    except AssertionError:
        return True
    return False


# ----------------------------------------------------------------------------------------------
# check
# ----------------------------------------------------------------------------------------------


def _expected_graphs(graphs, dynamo_graphs):
    if USE_DYNAMO and dynamo_graphs is not None:
        graphs = dynamo_graphs
    if isinstance(graphs, int):
        return (graphs,)
    return tuple(graphs)


def check(
    fn: Callable,
    *args: Any,
    graphs: int | Sequence[int] = 1,
    kwargs: dict | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    calls: int = 2,
    inputs_mutated: bool = False,
    fullgraph: bool = False,
    dynamic=None,
    dynamo_graphs: int | Sequence[int] | None = None,
    breaks: int | None = None,
) -> CountingBackend:
    """Run ``fn(*args, **kwargs)`` eagerly and compiled ``calls`` times each; compare; count graphs.

    graphs: how many FX graphs kiln must hand to the backend in all (an int, or a tuple of
        acceptable counts for constructs that a later version may capture).
    inputs_mutated: whether the case mutates its arguments (checked on the eager run, so the
        declaration stays honest); either way the compiled run must leave them as eager does.
    dynamo_graphs: the count under the dynamo reference engine where it differs from kiln's.
    breaks: how many graph breaks kiln may take in all (``kiln.stats.graph_breaks``), None: not
        checked. Take the value from ``torch._dynamo.explain(fn)(*args).graph_break_count``; it is
        not checked under the dynamo engine (its break counters miss data-dependent breaks).
    Returns the CountingBackend for extra asserts.
    """
    kwargs = kwargs or {}
    reset()
    counter = CountingBackend()
    original = clone_args((args, kwargs))

    eager_fn = clone_args(fn) if isinstance(fn, torch.nn.Module) else fn
    comp_target = clone_args(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled = compile_fn(comp_target, counter, fullgraph=fullgraph, dynamic=dynamic)

    eager_mods: dict = {}
    comp_mods: dict = {}
    counts = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_calls(calls, eager_fn, compiled, original, eager_mods, comp_mods, counter, counts, inputs_mutated,
                   rtol, atol)
    internal = [str(w.message) for w in caught if "kiln: internal error" in str(w.message)]
    assert not internal, f"kiln hit an internal error (and ran the frame eagerly): {internal[0]}"
    if isinstance(fn, torch.nn.Module):
        assert_same(comp_target, eager_fn, rtol=rtol, atol=atol, path="module after calls")

    _log_count(counts[0])
    expected = _expected_graphs(graphs, dynamo_graphs)
    assert counts[0] in expected, (
        f"first call produced {counts[0]} graph(s), expected {' or '.join(map(str, expected))}"
        + _graph_dump(counter))
    assert counts[-1] == counts[0], (
        f"later calls compiled again: graph counts per call {counts} (a call with the same inputs "
        f"must hit the cache)" + _graph_dump(counter))
    if breaks is not None and not USE_DYNAMO:
        taken = dict(kiln.stats.graph_breaks)
        assert sum(taken.values()) == breaks, f"{sum(taken.values())} graph break(s), expected {breaks}: {taken}"
    return counter


def _log_count(graphs: int) -> None:
    """With KILN_CORPUS_COUNTS_LOG=<file>, each check's first-call graph count is appended to it (one JSON
    line per check, keyed by test id and its check number): benchmarks/corpus_parity.py compares a kiln
    run's log with a dynamo run's (KILN_CORPUS_ENGINE=dynamo)."""
    path = os.environ.get("KILN_CORPUS_COUNTS_LOG")
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    _CHECKS_SEEN[test] = _CHECKS_SEEN.get(test, 0) + 1
    with open(path, "a") as f:
        f.write(json.dumps({"test": test, "check": _CHECKS_SEEN[test], "graphs": graphs}) + "\n")


_CHECKS_SEEN: dict = {}


def _run_calls(calls, eager_fn, compiled, original, eager_mods, comp_mods, counter, counts, inputs_mutated,
               rtol, atol) -> None:
    """check's calls: eager then compiled, comparing outputs and the arguments after each."""
    for i in range(calls):
        e_args, e_kwargs = clone_args(original, eager_mods)
        e_out = eager_fn(*e_args, **e_kwargs)
        if i == 0:
            mutated = _changed(original, (e_args, e_kwargs))
            if inputs_mutated:
                assert mutated, "case says inputs_mutated=True but eager left its arguments unchanged"
            else:
                assert not mutated, "eager mutated the arguments: pass inputs_mutated=True"

        c_args, c_kwargs = clone_args(original, comp_mods)
        c_out = compiled(*c_args, **c_kwargs)
        counts.append(len(counter.graphs))
        assert_same(c_out, e_out, rtol=rtol, atol=atol, path=f"call {i}: output")
        assert_same((c_args, c_kwargs), (e_args, e_kwargs), rtol=rtol, atol=atol, path=f"call {i}: arguments after")


def check_recompiles(
    fn: Callable,
    arg_sets: Iterable[tuple],
    *,
    graphs: int | Sequence[int],
    rtol: float | None = None,
    atol: float | None = None,
    dynamic=None,
    dynamo_graphs: int | Sequence[int] | None = None,
    per_call: Sequence[int] | None = None,
) -> CountingBackend:
    """Call one compiled ``fn`` on each argument tuple in turn, comparing with eager each time.

    graphs: total number of FX graphs after all calls (recompiles add graphs; a guard set seen
        before must hit the cache). per_call: optionally the running graph count after each call.
    An argument tuple may end in a dict, taken as kwargs, when wrapped as ``kw(args..., key=val)``.
    """
    reset()
    counter = CountingBackend()
    eager_fn = clone_args(fn) if isinstance(fn, torch.nn.Module) else fn
    comp_target = clone_args(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled = compile_fn(comp_target, counter, dynamic=dynamic)
    counts = []
    eager_mods: dict = {}
    comp_mods: dict = {}
    for i, call in enumerate(arg_sets):
        args, kwargs = (call.args, call.kwargs) if isinstance(call, kw) else (tuple(call), {})
        e_args, e_kwargs = clone_args((args, kwargs), eager_mods)
        c_args, c_kwargs = clone_args((args, kwargs), comp_mods)
        e_out = eager_fn(*e_args, **e_kwargs)
        c_out = compiled(*c_args, **c_kwargs)
        assert_same(c_out, e_out, rtol=rtol, atol=atol, path=f"call {i}: output")
        assert_same((c_args, c_kwargs), (e_args, e_kwargs), rtol=rtol, atol=atol, path=f"call {i}: arguments after")
        counts.append(len(counter.graphs))
    if isinstance(fn, torch.nn.Module):
        assert_same(comp_target, eager_fn, rtol=rtol, atol=atol, path="module after calls")
    if per_call is not None and not USE_DYNAMO:
        assert counts == list(per_call), f"graph count after each call {counts}, expected {list(per_call)}"
    expected = _expected_graphs(graphs, dynamo_graphs)
    assert counts[-1] in expected, (
        f"{counts[-1]} graph(s) after all calls (running counts {counts}), expected "
        f"{' or '.join(map(str, expected))}" + _graph_dump(counter))
    return counter


class kw:
    """An argument set with keyword arguments, for check_recompiles: ``kw(x, mask=m)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


def check_fullgraph_error(fn: Callable, *args: Any, marker: str | None = None, kwargs: dict | None = None,
                          filename: str | None = None) -> BaseException:
    """fullgraph=True must raise GraphBreakError naming the user's file and, with ``marker``, the line.

    marker: the text of a comment (``marker="BREAK:print"`` for a line ending in
    ``# BREAK:print``) on the source line the error must name. Returns the exception.
    """
    import pytest

    reset()
    counter = CountingBackend()
    compiled = compile_fn(fn, counter, fullgraph=True)
    with pytest.raises(graph_break_error_types()) as info:
        compiled(*clone_args(args), **clone_args(kwargs or {}))
    err = info.value
    msg = str(err)
    src_file = filename or inspect.getsourcefile(fn.forward if isinstance(fn, torch.nn.Module) else fn)
    assert os.path.basename(src_file) in msg, f"error does not name the file {os.path.basename(src_file)}:\n{msg}"
    if marker is not None:
        line = marker_line(src_file, marker)
        if USE_DYNAMO:
            assert f"line {line}" in msg or f":{line}" in msg, f"error does not name line {line}:\n{msg}"
        else:
            assert f"{os.path.basename(src_file)}:{line}" in msg, f"error does not name line {line}:\n{msg}"
            assert err.lineno == line, f"GraphBreakError.lineno {err.lineno} != {line}"
            assert os.path.basename(err.filename) == os.path.basename(src_file)
    assert len(counter.graphs) == 0 or USE_DYNAMO, "fullgraph=True failed yet a graph reached the backend"
    return err


def marker_line(path: str, marker: str) -> int:
    """Line number (1-based) of the one line in ``path`` with the comment ``# <marker>``."""
    with open(path) as f:
        hits = [i + 1 for i, line in enumerate(f) if "# " + marker in line]
    assert len(hits) == 1, f"marker {marker!r} found on lines {hits} of {path}; make it unique"
    return hits[0]


def _graph_dump(counter: CountingBackend) -> str:
    parts = []
    for i, gm in enumerate(counter.graphs):
        parts.append(f"\n--- graph {i} ---\n{gm.graph}")
    return "".join(parts)
