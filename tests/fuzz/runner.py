"""Run one generated program eagerly and under ``kiln.compile(f, backend=<counting eager backend>)``.

    outcome = run_source(src, tag="prog7")     # or run_seed(7)

The program's source is written to a real file (code objects get a filename), exec'd twice: into an
eager module and into a compiled module (so globals and class attributes each side mutates stay
apart). kiln is reset, ``f`` of the compiled module is compiled with a backend that counts the FX
graphs it gets and runs them as they are, and both sides are called on input set A, then on input
set B (other values, a longer list, another int and an extra key in the dict: guards must notice).
After each call: the return values (recursively, type-exact), the arguments (mutation), the
globals and class attributes, which arguments the result aliases, and the exception type raised.

Statuses (worst first): ``crash`` (kiln's own error escaped, or it hit an internal error and ran the
frame eagerly), ``exception`` (one side raised and the other did not, or other types),
``wrong`` (values differ), ``timeout``, ``invalid`` (the module does not load: only while
minimizing), ``pass``. Graph breaks and eager fallbacks are not failures;
they are counted.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import re
import signal
import sys
import tempfile
import traceback
import types
import warnings

import torch

import kiln
import kiln.errors

from .compare import Mismatch, ModulePair, same
from .grammar import generate

KILN_DIR = os.path.dirname(os.path.abspath(kiln.__file__)) + os.sep
STATUS_ORDER = ("crash", "exception", "wrong", "timeout", "invalid", "pass")
_TMP = tempfile.mkdtemp(prefix="kiln-fuzz-")


@dataclasses.dataclass
class Outcome:
    status: str = "pass"
    part: str = ""  # what differed: output / arguments / globals / aliasing / raised / internal
    detail: str = ""
    graphs: int = 0  # FX graphs after the first call / after both calls
    graphs_total: int = 0
    breaks: int = 0
    fallbacks: int = 0  # frames kiln ran eagerly (not counting internal errors)
    eager_raised: str = ""  # exception type eager raised on call A ("" if none)
    fallback_reasons: tuple = ()

    @property
    def failed(self) -> bool:
        return self.status not in ("pass", "invalid")

    @property
    def single_graph(self) -> bool:
        return self.graphs == 1 and self.breaks == 0 and self.fallbacks == 0

    def signature(self) -> tuple:
        """What a minimized program must keep doing to count as the same failure."""
        return (self.status, self.part, self.eager_raised)

    def worse(self, status: str, part: str, detail: str) -> None:
        if STATUS_ORDER.index(status) < STATUS_ORDER.index(self.status):
            self.status, self.part, self.detail = status, part, detail


class ProgramTimeout(BaseException):
    """A program ran too long (BaseException: the program's own `except Exception` must not catch it)."""


class CountingBackend:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def make_inputs(which: int, seed: int = 0) -> tuple:
    """Input set A (which=0) or B (which=1): x, y (2, 3) tensors, lst, d."""
    g = torch.Generator().manual_seed(1000 * seed + which)
    r = lambda: torch.randn(2, 3, generator=g)  # noqa: E731
    x, y = r(), r()
    lst = [r() for _ in range(3 + which)]
    d = {"a": r(), "b": 2 + which, "c": r()}
    if which:
        d["z"] = 1
    return x, y, lst, d


def load_module(src: str, path: str, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod


def module_state(mod: types.ModuleType) -> dict:
    """The program's mutable module-level state: G_* globals and class attributes."""
    state = {k: v for k, v in vars(mod).items() if k.startswith("G_")}
    for k, v in vars(mod).items():
        if isinstance(v, type) and v.__module__ == mod.__name__:
            for attr, val in vars(v).items():
                if not attr.startswith("__") and isinstance(val, (int, list, dict)):
                    state[f"{k}.{attr}"] = val
    return state


def _call(fn, args):
    try:
        return fn(*args), None
    except (ProgramTimeout, MemoryError):
        raise
    except Exception as exc:  # the program may raise; compared below
        return None, exc


def _from_kiln(exc: BaseException) -> bool:
    if isinstance(exc, kiln.errors.KilnError):
        return True
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and os.path.abspath(last).startswith(KILN_DIR)


def _aliases(out, args) -> list:
    """For the result and each element of a returned tuple/list/dict: the index of the argument it is."""
    items = [out] + (list(out.values()) if isinstance(out, dict) else list(out) if isinstance(out, (list, tuple)) else [])
    return [next((i for i, a in enumerate(args) if v is a), None) for v in items]


def _exc_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])


def compare_call(o: Outcome, label: str, eager, compiled, mods: ModulePair) -> None:
    """Compare one call's (result, exception, args after, module state) on both sides."""
    (e_out, e_exc, e_args, e_state), (c_out, c_exc, c_args, c_state) = eager, compiled
    if c_exc is not None and e_exc is None:
        if _from_kiln(c_exc):
            o.worse("crash", "raised", f"{label}: kiln raised {type(c_exc).__name__}: {c_exc}\n{_exc_text(c_exc)}")
        else:
            o.worse("exception", "raised", f"{label}: compiled raised {type(c_exc).__name__}: {c_exc}, eager "
                    f"returned\n{_exc_text(c_exc)}")
    elif e_exc is not None and c_exc is None:
        o.worse("exception", "raised", f"{label}: eager raised {type(e_exc).__name__}: {e_exc}, compiled returned")
    elif e_exc is not None and not mods.same_type(type(c_exc), type(e_exc)):
        status = "crash" if _from_kiln(c_exc) else "exception"
        o.worse(status, "raised", f"{label}: compiled raised {type(c_exc).__name__}: {c_exc}, eager "
                f"{type(e_exc).__name__}: {e_exc}\n{_exc_text(c_exc)}")
    checks = [("arguments", c_args, e_args, "args"), ("globals", c_state, e_state, "G")]
    if e_exc is None and c_exc is None:
        checks.insert(0, ("output", c_out, e_out, "out"))
        e_alias, c_alias = _aliases(e_out, e_args), _aliases(c_out, c_args)
        if e_alias != c_alias and len(e_alias) == len(c_alias):  # other lengths: the output check says
            o.worse("wrong", "aliasing", f"{label}: result aliases arguments {c_alias}, eager {e_alias}")
    for part, actual, expected, path in checks:
        try:
            same(actual, expected, mods, f"{label}: {path}")
        except Mismatch as exc:
            o.worse("wrong", f"{part}:{exc.kind}", str(exc))
        except Exception as exc:  # comparing itself failed (a program-defined __eq__, say)
            o.worse("wrong", f"{part}:compare", f"{label}: comparing {path} raised {type(exc).__name__}: {exc}")


def run_source(src: str, tag: str = "prog", input_seed: int = 0, timeout: int = 20) -> Outcome:
    """Run ``src``'s f eagerly and compiled on input sets A and B; compare (see module docstring)."""
    path = os.path.join(_TMP, f"fuzz_{tag}.py")
    with open(path, "w") as fh:
        fh.write(src)
    names = ModulePair(f"fuzz_{tag}_eager", f"fuzz_{tag}_compiled")
    o = Outcome()
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout)
    try:
        try:
            _run(src, path, names, o, input_seed)
        finally:
            signal.alarm(0)  # first: the alarm must not go off in a handler below
    except ProgramTimeout:
        o.worse("timeout", "timeout", f"ran over {timeout}s")
    except MemoryError:
        o.worse("timeout", "memory", "ran out of memory (see limit_memory)")
    except _InvalidProgram as exc:
        o.worse("invalid", "load", f"the module does not load: {exc.__cause__!r}")
    finally:
        signal.signal(signal.SIGALRM, old)
        sys.modules.pop(names.eager, None)
        sys.modules.pop(names.compiled, None)
        kiln.reset()
        os.unlink(path)
    return o


class _InvalidProgram(Exception):
    pass


def _on_alarm(signum, frame):
    signal.alarm(2)  # again soon, in case this one is swallowed (raised inside a weakref callback, say)
    raise ProgramTimeout()


def _run(src, path, names: ModulePair, o: Outcome, input_seed: int) -> None:
    try:
        eager_mod = load_module(src, path, names.eager)
        comp_mod = load_module(src, path, names.compiled)
        comp_mod.f  # noqa: B018
    except Exception as exc:
        raise _InvalidProgram() from exc
    kiln.reset()
    kiln.stats.reset()
    backend = CountingBackend()
    compiled = kiln.compile(comp_mod.f, backend=backend)
    for which, label in ((0, "call A"), (1, "call B")):
        inputs = make_inputs(which, input_seed)
        e_args, c_args = copy.deepcopy(inputs), copy.deepcopy(inputs)
        e_out, e_exc = _call(eager_mod.f, e_args)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c_out, c_exc = _call(compiled, c_args)
        for w in caught:
            msg = str(w.message)
            if msg.startswith("kiln: internal error"):
                o.worse("crash", _internal_part(msg), f"{label}: {msg}")
        if which == 0:
            o.graphs = len(backend.graphs)
            o.eager_raised = type(e_exc).__name__ if e_exc is not None else ""
        compare_call(o, label, (e_out, e_exc, e_args, module_state(eager_mod)),
                     (c_out, c_exc, c_args, module_state(comp_mod)), names)
        if which == 0:
            _count(o)
    o.graphs_total = len(backend.graphs)


def _count(o: Outcome) -> None:
    snap = kiln.stats.snapshot()
    o.breaks = sum(snap["graph_breaks"].values())
    reasons = {r: n for r, n in snap["eager_fallbacks"].items() if not r.startswith("internal error")}
    o.fallbacks = sum(reasons.values())
    o.fallback_reasons = tuple(sorted(reasons)) + tuple(sorted(snap["graph_breaks"]))
    for r in snap["eager_fallbacks"]:
        if r.startswith("internal error"):
            o.worse("crash", _internal_part(r), r)


def _internal_part(message: str) -> str:
    """"internal:TypeError" from "kiln: internal error in kiln: TypeError: ..." (the error's type)."""
    match = re.search(r": (\w+(?:Error|Exception|Iteration)):", message)
    return f"internal:{match.group(1)}" if match else "internal"


def limit_memory(gib: float = 6.0) -> tuple:
    """Cap this process's address space at what it uses now plus `gib`, so that a program that grows a
    list without end (a minimizer edit can unbound a loop) raises MemoryError instead of bringing the
    machine down. Returns the previous (soft, hard) limits for restore_memory_limit. Relative to the
    current size: a process that loaded CUDA already maps far more than a fixed cap would allow."""
    import resource

    previous = resource.getrlimit(resource.RLIMIT_AS)
    soft, hard = previous
    with open("/proc/self/statm") as f:
        in_use = int(f.read().split()[0]) * resource.getpagesize()
    cap = in_use + int(gib * 2**30)
    if (soft == resource.RLIM_INFINITY or soft > cap) and (hard == resource.RLIM_INFINITY or cap <= hard):
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return previous


def restore_memory_limit(previous: tuple) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, previous)


def run_seed(seed: int, timeout: int = 20) -> tuple[str, Outcome]:
    src = generate(seed)
    return src, run_source(src, tag=str(seed), timeout=timeout)
