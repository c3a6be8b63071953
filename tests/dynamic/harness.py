"""Harness of the end-to-end dynamic-shape corpus (issue 18): one compiled entry called on a sequence of
sizes, every call compared with eager (outputs, arguments after the call, module state and, for
training cases, gradients), and the number of graphs compiled checked where backends are dynamic.

    from .harness import check

    def test_flatten(backend):
        def f(x):
            return x.view(x.size(0), -1) * 2
        check(f, lambda n: (torch.randn(n, 3, 4),), backend, graphs=2)

``backend`` is a fixture (conftest.py) over ``BACKENDS``; a case with a known kiln bug on some backend
uses ``@pytest.mark.parametrize("backend", backends(xfail={"eager": "why"}))`` instead.

``graphs`` is the number of graphs the backend is handed with ``dynamic=None`` (the default) over
the call sequence: usually 2 (static first, then one dynamic entry for every later size), more where
0/1 specialization or a failing shape guard needs another entry. ``expected_compiles`` is the one place
that decides for which backends that number is checked; the others are checked for correctness only
(they compile every size statically until they take dynamic graphs).

Reference engine: ``KILN_DYNAMIC_ENGINE=dynamo python -m pytest tests/dynamic -k eager`` runs every case
under ``torch.compile`` (TorchDynamo, counting backend) to see how many graphs Dynamo compiles for the
same calls (``dynamo_graphs=`` where it differs from kiln's expectation). The tests never need dynamo.
"""
from __future__ import annotations

import copy
import os
from typing import Any, Callable, Iterable, Sequence

import pytest
import torch

import kiln
from kiln.api import config_of

BACKENDS = ["eager", "aot_eager", "kiln"]
DYNAMIC_GRAPH_BACKENDS = {"eager", "aot_eager", "kiln"}  # backends whose compile counts are checked (they take dynamic graphs)
ENGINE = os.environ.get("KILN_DYNAMIC_ENGINE", "kiln")
USE_DYNAMO = ENGINE == "dynamo"

SIZES = (8, 5, 13, 2, 32)  # default call sequence: static at 8, one dynamic entry for the rest
RTOL, ATOL = 1e-4, 1e-5
# The kiln backend compiles C++ for every size while it is static: it runs the first size of each
# sequence and every size 0 or 1 (KILN_DYNAMIC_ALL_SIZES=1 runs them all), to keep the corpus fast;
# aot_eager (cheap) runs every size, so the static recompile path is covered.
ALL_SIZES = os.environ.get("KILN_DYNAMIC_ALL_SIZES") == "1"
# KILN_DYNAMIC_PROBE_ONE=1: every sequence ends with a call at size 1 (where eager accepts it), which a
# dynamic entry serves unless its trace asked whether a size is 1: a soundness sweep of size-1 calls
# through graphs traced at larger sizes. Compile counts are then not checked (size 1 may add one).
PROBE_ONE = os.environ.get("KILN_DYNAMIC_PROBE_ONE") == "1"
SLOW_STATIC_BACKENDS = {"kiln"}


def backends(xfail: dict[str, str] | None = None) -> list:
    """BACKENDS as pytest params, with strict xfail marks for the backends named in ``xfail``; an
    ``"eager"`` reason (a limit of capture) marks every backend unless it has its own."""
    xfail = dict(xfail or {})
    if "eager" in xfail:  # capture's limits: every backend is handed the same graphs
        for b in BACKENDS:
            xfail.setdefault(b, xfail["eager"])
    return [pytest.param(b, marks=pytest.mark.xfail(strict=True, reason=xfail[b])) if b in xfail else b
            for b in BACKENDS]


def compiles(compiled) -> int:
    """Graphs handed to the backend so far by this compiled function or module (all its code objects)."""
    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


def expected_compiles(backend: str, compiled, n: int | None) -> None:
    """Check the compile count where the backend takes dynamic graphs; extend DYNAMIC_GRAPH_BACKENDS
    as aot_eager and kiln become dynamic."""
    if n is None or backend not in DYNAMIC_GRAPH_BACKENDS:
        return
    got = compiles(compiled)
    from kiln.debug.stats import stats
    assert got == n, (f"backend {backend!r} compiled {got} graphs, expected {n} "
                      f"(static fallbacks in this process: {dict(stats.dynamic_fallbacks)})")


# ----------------------------------------------------------------------------------------------
# running a case
# ----------------------------------------------------------------------------------------------


def _clone(args, train: bool):
    """Fresh copies of the arguments; with ``train`` floating tensors become leaves requiring grad."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            c = a.detach().clone()
            if train and c.is_floating_point():
                c.requires_grad_(True)
            out.append(c)
        else:
            out.append(copy.deepcopy(a))
    return out


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _backward(out, seed: int) -> None:
    """Backpropagate random cotangents (the same for eager and compiled) through every output with grad."""
    gen = torch.Generator().manual_seed(seed)
    outs = [t for t in _tensors(out) if t.requires_grad]
    assert outs, "a training case must return something that requires grad"
    grads = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in outs]
    torch.autograd.backward(outs, grads)


def _grads(args, module) -> list:
    gs = [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    if module is not None:
        gs += [p.grad for p in module.parameters()]
    return gs


def _state(module, attrs: Sequence[str]):
    if module is None:
        return None
    return {"state": {k: v.clone() for k, v in module.state_dict().items()},
            "attrs": {a: getattr(module, a, None) for a in attrs}}


def _assert_same(got, expected, what: str, size: int, exact: bool) -> None:
    tol = dict(rtol=0, atol=0) if exact else dict(rtol=RTOL, atol=ATOL)
    try:
        torch.testing.assert_close(got, expected, equal_nan=True, **tol)
    except AssertionError as e:
        raise AssertionError(f"{what} differs from eager at size {size}: {e}") from None
    if isinstance(expected, torch.Tensor):  # same size and dtype are checked by assert_close
        assert got.shape == expected.shape


def sizes_for(backend: str, sizes: Sequence[int]) -> list[int]:
    if ALL_SIZES or backend in DYNAMIC_GRAPH_BACKENDS or backend not in SLOW_STATIC_BACKENDS:
        return list(sizes)
    return list(sizes[:1]) + [n for n in sizes[1:] if n <= 1]


def compile_for(fn, backend: str, dynamic):
    if USE_DYNAMO:
        import torch._dynamo  # reference engine only: tests/ may use dynamo, kiln never does

        torch._dynamo.reset()
        graphs = []

        def counting(gm, example_inputs):
            graphs.append(gm)
            return gm.forward
        compiled = torch.compile(fn, backend=counting, dynamic=dynamic)
        compiled._dyn_graphs = graphs
        return compiled
    return kiln.compile(fn, backend=backend, dynamic=dynamic)


def check(fn: Callable, make: Callable[[int], Iterable], backend: str, *, sizes: Sequence[int] = SIZES,
          graphs: int | None = None, dynamo_graphs: int | None = None, dynamic=None, train: bool = False,
          attrs: Sequence[str] = (), exact: bool = False, steps: Callable | None = None):
    """Call ``fn`` (a function or nn.Module) eagerly and compiled on ``make(n)`` for each n in ``sizes``.

    Each call gets fresh copies of the arguments (made with the seed n); a module is deep-copied once so
    eager and compiled runs keep separate state (compared after each call, with ``attrs``). ``train``:
    floating inputs require grad, random cotangents are backpropagated and input and parameter grads
    compared; ``steps(module)`` (e.g. an SGD step) then runs on both modules. Returns the compiled object.
    """
    if USE_DYNAMO and backend != "eager":
        pytest.skip("the dynamo reference runs each case once")
    module = fn if isinstance(fn, torch.nn.Module) else None
    twin = copy.deepcopy(module) if module is not None else None
    compiled = compile_for(twin if twin is not None else fn, backend, dynamic)
    run = sizes_for(backend, sizes) + ([1] if PROBE_ONE and not USE_DYNAMO else [])
    for i, n in enumerate(run):
        torch.manual_seed(n)
        if PROBE_ONE and i == len(run) - 1:  # (a size-1 call eager refuses, or that changes module state
            try:                               # in a way the probe cannot undo, is not probed)
                args = tuple(make(n))
                probe_module = copy.deepcopy(module) if module is not None else None
                (probe_module or fn)(*_clone(args, train))
            except Exception:
                break
        args = tuple(make(n))
        eager_args, comp_args = _clone(args, train), _clone(args, train)
        expected = fn(*eager_args)
        got = compiled(*comp_args)
        _assert_same(got, expected, "output", n, exact)
        _assert_same(comp_args, eager_args, "arguments after the call", n, exact)
        if train:
            _backward(expected, seed=1000 + i)
            _backward(got, seed=1000 + i)
            _assert_same(_grads(comp_args, twin), _grads(eager_args, module), "gradients", n, exact)
            if steps is not None:
                steps(module)
                steps(twin)
            for m in (module, twin):
                if m is not None:
                    m.zero_grad(set_to_none=True)
        _assert_same(_state(twin, attrs), _state(module, attrs), "module state", n, exact)
    if USE_DYNAMO:
        want = dynamo_graphs if dynamo_graphs is not None else graphs
        got_graphs = len(compiled._dyn_graphs)
        if want is not None:
            assert got_graphs == want, f"dynamo compiled {got_graphs} graphs, kiln expects {graphs}"
    elif not PROBE_ONE:
        expected_compiles(backend, compiled, graphs)
    return compiled


def sgd(lr: float = 0.1) -> Callable[[torch.nn.Module], None]:
    """An optimizer step for check(steps=...): plain SGD on every parameter with a grad."""
    def step(module):
        with torch.no_grad():
            for p in module.parameters():
                if p.grad is not None:
                    p -= lr * p.grad
    return step

