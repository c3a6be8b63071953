"""Harness of the graph-break cases: run a case eagerly and compiled, compare everything, count.

    from .support import check_breaks, graph_break
    def test_print_mid():
        def fn(x):
            y = x * 2
            print("y ready")
            return y + 1
        check_breaks(fn, t(3), graphs=2, breaks=1)

``check_breaks`` builds on the corpus harness (tests/corpus/harness.py): it resets kiln, compiles
``fn`` with a CountingBackend, and then runs every argument set (``arg_sets``, default ``[args]``)
``calls`` times, each run eagerly and compiled on fresh copies of the arguments. After each run it
compares (compiled against eager)

- the output (after ``post(out)`` when given, e.g. to call a returned closure),
- the arguments afterwards (in-place ops, appended lists, object attributes, module state),
- whatever ``observe()`` returns (globals, closure cells, files, log records), where ``setup()``
  puts that state back before each run,
- what the run printed to stdout.

Modules and optimizers among the arguments (and ``fn`` itself when it is a module) are copied once
per side and then passed as the same objects on every call, as a training loop does; their state is
compared after every call. Counts:

- ``graphs``: FX graphs handed to the backend after the first pass over ``arg_sets`` (all frames,
  resume functions included). Later passes must hit the cache: no new graph. With
  ``stable_after=k`` the first k passes may add graphs (an optimizer creating its state on the first
  step) and ``graphs`` is the count after the last pass, which must equal the count after pass k.
- ``breaks``: ``kiln.explain(fn)(*arg_sets[0]).graph_break_count``, one fresh run. Every break is
  counted, also one whose surrounding code holds no tensor op. (TorchDynamo's explain reports
  ``graph_count - 1`` instead; the two agree except where a segment between breaks has no graph or
  a loop re-enters the same resume function; cases where they differ give ``dynamo_breaks``.)
- ``where``: markers (``# BREAK:name`` comments) of source lines that explain's break reasons must
  name (file and line).

``KILN_CORPUS_ENGINE=dynamo`` runs the cases under torch.compile / torch._dynamo.explain to check the
expectations against PyTorch's own capture (``dynamo_graphs`` / ``dynamo_breaks`` where a case says
dynamo differs, with the reason in a comment). The dynamo counts are those of torch 2.13 (CPU, Python 3.11),
where every case passes; torch 2.11 (GPU machine, Python 3.12) gives other counts in six cases
(test_while_on_tensor_condition, test_early_return_in_range_loop_on_tensor_condition,
test_loop_break_statement_on_item_condition, test_dict_comprehension_calling_breaking_helper,
test_training_loop_over_batches_in_one_function, test_early_exit_model_both_ways). ``KILN_BREAKS_RECORD=<file>`` (either engine) writes
the counts each case sees as JSON lines instead of asserting them, to review expectations.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
from typing import Any, Callable, Sequence

import torch

from tests.corpus.harness import (USE_DYNAMO, CountingBackend, assert_same, find_instances, check, check_fullgraph_error,
                                  check_recompiles, compile_fn, marker_line, reset)

if USE_DYNAMO:
    import torch._dynamo as _dynamo

    graph_break = _dynamo.graph_break
    disable = _dynamo.disable
else:
    import kiln

    def _graph_break_missing() -> None:
        """Stand-in while kiln has no graph_break(): a no-op, so the cases using it fail their counts."""

    graph_break = getattr(kiln, "graph_break", _graph_break_missing)
    disable = kiln.disable

RECORD = os.environ.get("KILN_BREAKS_RECORD")

__all__ = ["USE_DYNAMO", "CountingBackend", "assert_same", "check", "check_breaks", "check_fullgraph_error",
           "check_recompiles", "compile_fn", "disable", "explain_breaks", "graph_break", "marker_line", "reset", "t"]


def t(*shape, seed: int = 0, scale: float = 1.0, requires_grad: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    out = torch.randn(*shape, generator=g) * scale
    return out.requires_grad_() if requires_grad else out


# ----------------------------------------------------------------------------------------------
# copies that keep modules and optimizers alive across calls, one set per side
# ----------------------------------------------------------------------------------------------

_PERSISTENT = (torch.nn.Module, torch.optim.Optimizer)


def _find_persistent(value: Any) -> list:
    return find_instances(value, _PERSISTENT)


class _Side:
    """One side (eager or compiled): its copies of the persistent objects, made once, jointly."""

    def __init__(self, originals: list) -> None:
        copies = copy.deepcopy(originals)  # one deepcopy: optimizers keep pointing at their model's params
        self.memo_base = {id(o): c for o, c in zip(originals, copies)}

    def copy(self, value: Any) -> Any:
        return copy.deepcopy(value, dict(self.memo_base))


def _comparable(value: Any, depth: int = 0) -> Any:
    """Optimizers compare by state_dict (their state is keyed by parameter tensors)."""
    if isinstance(value, torch.optim.Optimizer):
        return value.state_dict()
    if depth > 4:
        return value
    if isinstance(value, tuple) and not hasattr(type(value), "_fields"):
        return tuple(_comparable(v, depth + 1) for v in value)
    if type(value) is list:
        return [_comparable(v, depth + 1) for v in value]
    return value


def _run(fn: Callable, args: tuple, kwargs: dict, setup, observe) -> tuple[Any, Any, str]:
    if setup is not None:
        setup()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        out = fn(*args, **kwargs)
    state = copy.deepcopy(observe()) if observe is not None else None
    return out, state, buf.getvalue()


# ----------------------------------------------------------------------------------------------
# explain
# ----------------------------------------------------------------------------------------------


def explain_breaks(fn: Callable, args: tuple, kwargs: dict | None = None) -> tuple[int, list]:
    """(graph_break_count, [(reason, filename, lineno)]) of one fresh explain run of ``fn``."""
    kwargs = kwargs or {}
    buf = io.StringIO()
    if USE_DYNAMO:
        with contextlib.redirect_stdout(buf):
            report = _dynamo.explain(fn)(*args, **kwargs)
        reasons = []
        for r in report.break_reasons:
            frame = r.user_stack[-1] if r.user_stack else None
            reasons.append((r.reason, frame.filename if frame else "", frame.lineno if frame else 0))
        return report.graph_break_count, reasons
    with contextlib.redirect_stdout(buf):
        report = kiln.explain(fn, backend="eager")(*args, **kwargs)
    reasons = [(r.reason, r.filename, r.lineno) for r in report.break_reasons]
    return report.graph_break_count, reasons


def _record(entry: dict) -> None:
    entry["test"] = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    entry["engine"] = "dynamo" if USE_DYNAMO else "kiln"
    with open(RECORD, "a") as f:
        f.write(json.dumps(entry, default=str) + "\n")


# ----------------------------------------------------------------------------------------------
# check_breaks
# ----------------------------------------------------------------------------------------------


def _as_tuple(v) -> tuple:
    return (v,) if isinstance(v, int) else tuple(v)


def check_breaks(
    fn: Callable,
    *args: Any,
    graphs: int | Sequence[int],
    breaks: int | Sequence[int],
    arg_sets: Sequence[tuple] | None = None,
    kwargs: dict | None = None,
    calls: int = 2,
    setup: Callable[[], None] | None = None,
    observe: Callable[[], Any] | None = None,
    post: Callable[[Any], Any] | None = None,
    inputs_mutated: bool = False,
    where: Sequence[str] = (),
    rtol: float | None = None,
    atol: float | None = None,
    dynamo_graphs: int | Sequence[int] | None = None,
    dynamo_breaks: int | Sequence[int] | None = None,
    stdout: bool = True,
    stable_after: int = 0,
    dynamo_recompiles: bool = False,
) -> CountingBackend:
    """Run the case (see the module docstring); returns the CountingBackend for extra asserts."""
    kwargs = kwargs or {}
    sets = [tuple(a) for a in arg_sets] if arg_sets is not None else [args]
    assert sets, "no argument sets"
    originals = copy.deepcopy(sets)
    persistent = _find_persistent(originals)
    is_module = isinstance(fn, torch.nn.Module)
    if is_module:
        persistent = [fn] + persistent
    eager_side, comp_side = _Side(persistent), _Side(persistent)
    eager_fn = eager_side.copy(fn) if is_module else fn
    comp_target = comp_side.copy(fn) if is_module else fn

    reset()
    counter = CountingBackend()
    compiled = compile_fn(comp_target, counter)

    counts = []
    for rep in range(calls):
        for i, call_args in enumerate(sets):
            where_ = f"pass {rep} arg set {i}"
            e_args = eager_side.copy(originals[i])
            e_out, e_state, e_text = _run(eager_fn, e_args, kwargs, setup, observe)
            if rep == 0 and i == 0:
                try:
                    assert_same(_comparable(e_args), _comparable(originals[0]), rtol=0, atol=0)
                    mutated = False
                except AssertionError:
                    mutated = True
                if mutated and not inputs_mutated:
                    raise AssertionError("eager mutated the arguments: pass inputs_mutated=True")
                if inputs_mutated and not mutated:
                    raise AssertionError("case says inputs_mutated=True but eager left its arguments unchanged")
            c_args = comp_side.copy(originals[i])
            c_out, c_state, c_text = _run(compiled, c_args, kwargs, setup, observe)
            if post is not None:
                e_out, c_out = post(e_out), post(c_out)
            assert_same(c_out, e_out, rtol=rtol, atol=atol, path=f"{where_}: output")
            assert_same(_comparable(c_args), _comparable(e_args), rtol=rtol, atol=atol,
                        path=f"{where_}: arguments after")
            assert_same(c_state, e_state, rtol=rtol, atol=atol, path=f"{where_}: observed state")
            if stdout:
                assert c_text == e_text, f"{where_}: printed\n{c_text!r}\nbut eager printed\n{e_text!r}"
            if is_module:
                assert_same(comp_target, eager_fn, rtol=rtol, atol=atol, path=f"{where_}: module after")
        counts.append(len(counter.graphs))

    # explain: one fresh run on the first argument set (fresh copies of modules too)
    explain_side = _Side(persistent)
    target = explain_side.copy(fn) if is_module else fn
    if setup is not None:
        setup()
    n_breaks, reasons = explain_breaks(target, explain_side.copy(originals[0]), kwargs)

    exp_graphs = _as_tuple(dynamo_graphs if USE_DYNAMO and dynamo_graphs is not None else graphs)
    exp_breaks = _as_tuple(dynamo_breaks if USE_DYNAMO and dynamo_breaks is not None else breaks)
    src = _source_file(fn)
    lines = [marker_line(src, m) for m in where]
    if RECORD:
        _record({"graphs": counts, "expected_graphs": exp_graphs, "breaks": n_breaks,
                 "expected_breaks": exp_breaks, "reasons": [(r[0][:80], os.path.basename(r[1]), r[2])
                                                            for r in reasons],
                 "where": lines})
        return counter
    dump = _graph_dump(counter, reasons)
    settled = counts[min(stable_after, len(counts) - 1)]
    if not (USE_DYNAMO and dynamo_recompiles):
        assert counts[-1] == settled, (
            f"later passes compiled again: graph counts after each pass {counts} (repeated inputs must hit "
            f"the cache)" + dump)
    got = counts[-1] if stable_after else counts[0]
    assert got in exp_graphs, (
        f"{got} graph(s) after pass {stable_after} (counts after each pass: {counts}), expected "
        f"{' or '.join(map(str, exp_graphs))}" + dump)
    assert n_breaks in exp_breaks, (
        f"explain counted {n_breaks} graph break(s), expected {' or '.join(map(str, exp_breaks))}" + dump)
    for marker, line in zip(where, lines):
        hits = [r for r in reasons if r[2] == line and os.path.basename(r[1]) == os.path.basename(src)]
        assert hits, f"no break reason names {os.path.basename(src)}:{line} (# {marker})" + dump
    return counter


def _source_file(fn: Callable) -> str:
    import inspect

    target = type(fn).forward if isinstance(fn, torch.nn.Module) else fn
    return inspect.getsourcefile(inspect.unwrap(target))


def _graph_dump(counter: CountingBackend, reasons: list) -> str:
    parts = ["\nbreak reasons (explain):"]
    parts += [f"\n  {os.path.basename(f)}:{n}: {r.splitlines()[0] if r else r}" for r, f, n in reasons]
    for i, gm in enumerate(counter.graphs):
        parts.append(f"\n--- graph {i} ---\n{gm.graph}")
    return "".join(parts)
