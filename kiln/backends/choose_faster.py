"""Never slower than eager: a graph's generated code is timed against the captured graph run by eager
PyTorch on its first calls, and the faster one runs from then on (``Options.choose_faster``).

Generated code can lose to eager where the work is in library calls (GEMM-bound decoder graphs on the
CPU) and the extra kernels or copies cost more than fusion saves. The compiled callable is wrapped in
``FasterOfTwo``:

    call 1               the generated code (its kernels build and load; not timed)
    call 2               eager (warm-up; not timed)
    calls 3 .. 2+2*T     eager and the generated code in turn, each call timed (CUDA: synchronized)
    then                 the one with the lower median runs; eager must be faster by MARGIN to win

The race ends after 2*EARLY timed calls where every call of one was SEPARATION x faster than every call
of the other (a clear winner: the slow one is not run T times).

Both compute the same function of the inputs (eager is the reference every test compares with), so
the choice changes speed only. It is made once per compiled graph, counted in
``kiln.stats.speed_choices`` and reported by ``describe()`` (``explain`` shows the pending rule).

Not raced (the generated code always runs): training graphs (autograd functions: their backward cannot
be timed from the forward call), graphs with symbolic sizes (the faster one may differ by size),
graphs with random ops (the two draw different numbers; switching mid-run would change the stream),
graphs with collectives (ranks could choose differently),
and CUDA-graph runners (mode="reduce-overhead": replay is the fast path).

The choice is kept in the graph's warm-cache entry (``WarmStart.record_choice``): a new process that
loads the graph from the warm cache replays it instead of racing again (its calls 2..12 run the chosen
code, not the trials), unless the choice is stale (``valid_choice``: another rule version, another number
of CPU threads, another device), when it races again and keeps the new choice. The verdict on the ATen
graph's ops (random ops, collectives) is kept with the entry too, so a loaded graph is raced only where
a fresh compile would be.
"""
from __future__ import annotations

import statistics
import time

import torch

from kiln.aot.graph import is_collective
from kiln.aot.symbols import has_symbols
from kiln.backends.seeded_ops import draws_random_numbers
from kiln.debug.stats import stats

TRIALS = 5  # timed calls of each candidate
MARGIN = 0.97  # eager wins when its median is below MARGIN x the generated code's
KEEP_EAGER = 0.8  # an eager win is kept in the warm cache when eager's median is below this x kiln's
EARLY, SEPARATION = 2, 1.5  # after EARLY calls of each, one SEPARATION x faster in every call wins at once
CHOICE_FORMAT = f"kiln-speed-choice-1:{TRIALS}:{MARGIN}"  # a choice kept in the warm cache


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
        # loaded from the warm cache: the verdict on its ATen graph's ops was stored with the entry
        return getattr(runtime, "warm_race_ops", "no ATen graph to check for random ops (loaded from the warm cache)")
    return ops_reason(list(gm.graph.nodes) + list(aten_gm.graph.nodes))


def ops_reason(nodes) -> str | None:
    """Why graphs with these nodes are not raced (random ops, collectives), or None."""
    if any(draws_random_numbers(n) for n in nodes):
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
        self.on_decide = None  # called with the choice (``choice()``) once decided: the warm cache keeps it
        self.replayed = False  # the choice came from the warm cache (no calls were timed in this process)

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
        if (len(self.times["kiln"]) >= TRIALS and len(self.times["eager"]) >= TRIALS) or self._clear_winner():
            self._decide()
        return out

    def _clear_winner(self) -> bool:
        """After EARLY timed calls of each: every call of one was SEPARATION x faster than every call of
        the other, so more trials cannot change the choice (the race ends sooner: fewer calls of the slow one)."""
        kiln_t, eager_t = self.times["kiln"], self.times["eager"]
        if len(kiln_t) < EARLY or len(eager_t) != len(kiln_t):
            return False
        return max(kiln_t) * SEPARATION < min(eager_t) or max(eager_t) * SEPARATION < min(kiln_t)

    def _decide(self) -> None:
        kiln_s, eager_s = (statistics.median(self.times[k]) for k in ("kiln", "eager"))
        self._choose("eager" if eager_s < MARGIN * kiln_s else "kiln", (kiln_s, eager_s))
        if self.on_decide is not None:
            self.on_decide(self.choice())

    def _choose(self, chosen: str, medians: tuple) -> None:
        self.chosen, self.medians = chosen, medians
        self.run = self.eager if self.chosen == "eager" else self.compiled
        stats.speed_choices[self.chosen] += 1
        if self.chosen == "eager":
            stats.aten_fallbacks[f"whole graph: eager was faster ({self.describe()})"] += 1

    def choice(self) -> dict:
        """The decision as the warm cache keeps it (``valid_choice`` checks one read back). A narrow eager
        win (eager not below KEEP_EAGER x the generated code's median) is kept as "kiln": every later
        process would pay for one noisy race on a busy machine, and generated code is the default."""
        kiln_s, eager_s = self.medians
        chosen = "eager" if self.chosen == "eager" and eager_s < KEEP_EAGER * kiln_s else "kiln"
        return {"format": CHOICE_FORMAT, "chosen": chosen, "medians": list(self.medians),
                "threads": torch.get_num_threads(), "cuda": self.cuda}

    def replay(self, choice: dict) -> None:
        """Take a decision made in an earlier process for the same graph (``valid_choice``): no race."""
        self.replayed = True
        self._choose(choice["chosen"], tuple(choice["medians"]))

    def describe(self) -> str:
        if self.chosen is None:
            return (f"not decided yet: kiln times its code against eager on the first {2 + 2 * TRIALS} calls (fewer "
                    f"where one is clearly faster) "
                    f"and keeps the faster (Options.choose_faster / KILN_CHOOSE_FASTER=0 turns it off)")
        kiln_s, eager_s = self.medians
        timed = ("timed in an earlier process, kept in the warm cache" if self.replayed
                 else f"median of {len(self.times['kiln'])} calls each")
        return (f"{self.name}: {self.chosen} runs ({timed}: generated code "
                f"{kiln_s * 1e3:.3f} ms, eager {eager_s * 1e3:.3f} ms)")

    def __getattr__(self, name):
        return getattr(self.__dict__["compiled"], name)


def valid_choice(choice, cuda: bool) -> str | None:
    """None when ``choice`` (read from a warm-cache entry) can be replayed here, else why it is stale: made
    by another version of the rule, with another number of CPU threads (what the timing depends on), or
    on another device."""
    if not isinstance(choice, dict) or choice.get("format") != CHOICE_FORMAT:
        return "another format"
    if choice.get("chosen") not in ("kiln", "eager") or len(choice.get("medians") or ()) != 2:
        return "malformed"
    if choice.get("threads") != torch.get_num_threads():
        return f"timed with {choice.get('threads')} CPU threads, {torch.get_num_threads()} now"
    if choice.get("cuda") != cuda:
        return "timed on another device"
    return None


def race(gm, example_inputs, runtime, options, warm=None):
    """``runtime`` wrapped in ``FasterOfTwo`` against eager ``gm`` where ``should_race``; else itself.
    ``warm`` (the graph's ``WarmStart``): a valid choice kept in its entry is replayed without a race;
    otherwise the choice made here is kept in the entry."""
    if should_race(gm, example_inputs, runtime, options) is not None:
        return runtime
    cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)
    chooser = FasterOfTwo(runtime, gm.forward, getattr(gm, "_get_name", lambda: "graph")(), cuda)
    stored = warm.stored_choice() if warm is not None else None
    if stored is not None and valid_choice(stored, cuda) is None:
        chooser.replay(stored)
    elif warm is not None:
        if stored is not None:
            stats.warm_cache[f"speed choice ignored: {valid_choice(stored, cuda)}"[:120]] += 1
        chooser.on_decide = warm.record_choice
    inner = getattr(runtime, "kiln_explain", None)
    chooser.kiln_explain = lambda: (inner() if callable(inner) else "") + "\nspeed choice: " + chooser.describe()
    return chooser
