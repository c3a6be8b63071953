"""Never slower than eager: a graph's generated code is timed against the captured graph run by eager
PyTorch on its first calls, and the faster one runs from then on (``Options.choose_faster``).

Generated code can lose to eager where the work is in library calls (GEMM-bound decoder graphs on the
CPU) and the extra kernels or copies cost more than fusion saves. The compiled callable is wrapped in
``FasterOfTwo``:

    call 1               the generated code (its kernels build and load; not timed)
    call 2               eager (warm-up; not timed)
    calls 3 .. 2+2*T     eager and the generated code in turn, each call timed (CUDA: synchronized)
    then                 the one with the lower median runs; eager must be faster by MARGIN to win

Both compute the same function of the inputs (eager is the reference every test compares with), so
the choice changes speed only. It is made once per compiled graph, counted in
``kiln.stats.speed_choices`` and reported by ``describe()`` (``explain`` shows the pending rule).

Not raced (the generated code always runs): training graphs (autograd functions: their backward cannot
be timed from the forward call), graphs with symbolic sizes (the faster one may differ by size),
graphs with random ops (the two draw different numbers; switching mid-run would change the stream),
graphs with collectives (ranks could choose differently),
and CUDA-graph runners (mode="reduce-overhead": replay is the fast path).
"""
from __future__ import annotations

import statistics
import time

import torch

from kiln.aot.graph import is_collective
from kiln.aot.schema import is_random
from kiln.aot.symbols import has_symbols
from kiln.debug.stats import stats

TRIALS = 5  # timed calls of each candidate
MARGIN = 0.97  # eager wins when its median is below MARGIN x the generated code's


def should_race(gm, example_inputs, runtime, options) -> str | None:
    """None when the graph's generated code should be raced against eager, else why not."""
    if not options.choose_faster:
        return "Options.choose_faster is off"
    if getattr(runtime, "plan", None) is not None:
        return "a training graph (its backward is not timed)"
    if options.cudagraphs:
        return "CUDA graphs replay it"
    # (the captured graph's inputs carry their fakes as example_value; the example inputs are real)
    if any(has_symbols(n.meta.get("example_value", n.meta.get("val"))) for n in gm.graph.nodes if n.op == "placeholder"):
        return "symbolic sizes"
    aten_gm = getattr(getattr(runtime, "aten_graph", None), "gm", None)
    if aten_gm is None:
        return "no ATen graph to check for random ops (loaded from the warm cache)"
    nodes = list(gm.graph.nodes) + list(aten_gm.graph.nodes)
    if any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and is_random(n.target)
           for n in nodes):
        return "random ops"
    if any(n.op == "call_function" and is_collective(n.target) for n in nodes):
        return "collectives (every rank must run the same code: a choice by timing may differ per rank)"
    return None


class FasterOfTwo:
    """Runs ``compiled`` and ``eager`` (same function) in turn on the first calls; keeps the faster."""

    def __init__(self, compiled, eager, name: str, cuda: bool):
        self.compiled, self.eager, self.name, self.cuda = compiled, eager, name, cuda
        self.calls = 0
        self.times: dict[str, list[float]] = {"kiln": [], "eager": []}
        self.chosen = None  # "kiln" or "eager" once decided
        self.run = None  # the chosen callable

    def __call__(self, *args):
        if self.run is not None:
            return self.run(*args)
        self.calls += 1
        if self.calls == 1:
            return self.compiled(*args)
        if self.calls == 2:
            return self.eager(*args)
        which = "eager" if self.calls % 2 else "kiln"
        fn = self.eager if which == "eager" else self.compiled
        if self.cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn(*args)
        if self.cuda:
            torch.cuda.synchronize()
        self.times[which].append(time.perf_counter() - start)
        if len(self.times["kiln"]) >= TRIALS and len(self.times["eager"]) >= TRIALS:
            self._decide()
        return out

    def _decide(self) -> None:
        kiln_s, eager_s = (statistics.median(self.times[k]) for k in ("kiln", "eager"))
        self.chosen = "eager" if eager_s < MARGIN * kiln_s else "kiln"
        self.run = self.eager if self.chosen == "eager" else self.compiled
        self.medians = (kiln_s, eager_s)
        stats.speed_choices[self.chosen] += 1
        if self.chosen == "eager":
            stats.aten_fallbacks[f"whole graph: eager was faster ({self.describe()})"] += 1

    def describe(self) -> str:
        if self.chosen is None:
            return (f"not decided yet: kiln times its code against eager on the first {2 + 2 * TRIALS} calls "
                    f"and keeps the faster (Options.choose_faster / KILN_CHOOSE_FASTER=0 turns it off)")
        kiln_s, eager_s = self.medians
        return (f"{self.name}: {self.chosen} runs (median of {TRIALS} calls: generated code {kiln_s * 1e3:.3f} ms, "
                f"eager {eager_s * 1e3:.3f} ms)")

    def __getattr__(self, name):
        return getattr(self.__dict__["compiled"], name)


def race(gm, example_inputs, runtime, options):
    """``runtime`` wrapped in ``FasterOfTwo`` against eager ``gm`` where ``should_race``; else itself."""
    if should_race(gm, example_inputs, runtime, options) is not None:
        return runtime
    cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)
    chooser = FasterOfTwo(runtime, gm.forward, getattr(gm, "_get_name", lambda: "graph")(), cuda)
    inner = getattr(runtime, "kiln_explain", None)
    chooser.kiln_explain = lambda: (inner() if callable(inner) else "") + "\nspeed choice: " + chooser.describe()
    return chooser
