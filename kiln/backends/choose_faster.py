"""Never slower than eager: a graph's generated code is timed against the captured graph run by eager
PyTorch on its first calls, and the faster one runs from then on (``Options.choose_faster``). On the
GPU, an inference graph's generated code is also timed replayed from a CUDA graph (``default_graphs.py``),
which removes the host's per-kernel launch cost where that cost dominates.

Generated code can lose to eager where the work is in library calls (GEMM-bound decoder graphs on the
CPU) and the extra kernels or copies cost more than fusion saves. The compiled callable is wrapped in
``FastestOf``, whose candidates are "kiln" (the generated code), "eager", and on the GPU "graphs":

    call 1     the generated code (its kernels build and load; not timed)
    call 2     the trial: each other candidate runs untimed (warm-up; the CUDA graph is recorded), then
               rounds of every candidate in turn, each run timed (CUDA: synchronized), until TRIALS
               rounds, or EARLY rounds once one candidate is clearly fastest (SEPARATION x faster in
               every run) or the trial has taken TRIAL_BUDGET_S and no median ratio is within CLOSE of
               its margin; the call returns the last run's result
    then       the candidate with the lowest median runs: eager must be faster than the best generated
               candidate by MARGIN to win, and CUDA-graph replay faster than plain launches by GRAPHS_MARGIN
               (a recording holds its memory pool)

So the choice is made within the second call, and the third call runs at the chosen speed. A graph
that mutates its inputs cannot run several times in one call: its trial takes one call per run instead
(call 2 eager's warm-up, then eager and the generated code in turn, one per call), and it gets no
CUDA-graph candidate (its inputs are written through static copies there).

All candidates compute the same function of the inputs (eager is the reference every test compares
with), so the choice changes speed only. It is made once per compiled graph, counted in
``kiln.stats.speed_choices`` and reported by ``describe()`` (``explain`` shows the pending rule).

Not raced (the generated code always runs): training graphs (autograd functions: their backward cannot
be timed from the forward call), graphs with symbolic sizes (the faster one may differ by size; on the
GPU, ``default_graphs.HotShapes`` races CUDA-graph replay per recurring shape instead),
graphs with random ops (the two draw different numbers; switching mid-run would change the stream),
graphs with collectives (ranks could choose differently),
and CUDA-graph runners (mode="reduce-overhead": replay is the fast path).

The choice is kept in the graph's warm-cache entry (``WarmStart.record_choice``): a new process that
loads the graph from the warm cache replays it instead of racing again, unless the choice is stale
(``valid_choice``: another rule version, another number of CPU threads, another device), when it races
again and keeps the new choice. The verdict on the ATen graph's ops (random ops, collectives) is kept
with the entry too, so a loaded graph is raced only where a fresh compile would be.
"""
from __future__ import annotations

import statistics
import time

import torch

from kiln.aot.graph import is_collective
from kiln.aot.symbols import has_symbols
from kiln.backends.seeded_ops import draws_random_numbers
from kiln.debug.stats import stats

TRIALS = 5  # timed runs of each candidate
MARGIN = 0.97  # eager wins when its median is below MARGIN x the best generated candidate's
GRAPHS_MARGIN = 0.95  # CUDA-graph replay is kept when its median is below this x plain launches'
KEEP_EAGER = 0.8  # an eager win is kept in the warm cache when eager's median is below this x kiln's
EARLY, SEPARATION = 2, 1.5  # after EARLY runs of each, one SEPARATION x faster in every run wins at once
TRIAL_BUDGET_S = 0.25  # a trial call stops after EARLY rounds once it has taken this long, unless close:
CLOSE = 0.06  # a median ratio within this of its margin runs all TRIALS rounds (two runs each are noisy)
CHOICE_FORMAT = f"kiln-speed-choice-2:{TRIALS}:{MARGIN}:{GRAPHS_MARGIN}"  # a choice kept in the warm cache
GENERATED = ("kiln", "graphs")  # the candidates running kiln's generated code
SYMBOLIC_SIZES = "symbolic sizes"  # should_race's reason for graphs with symbolic sizes (default_graphs.HotShapes)


def should_race(gm, example_inputs, runtime, options) -> str | None:
    """None when the graph's generated code should be raced against eager, else why not."""
    if not options.choose_faster:
        return "Options.choose_faster is off"
    from kiln.aot.training import TrainingRuntime

    if getattr(runtime, "plan", None) is not None or isinstance(runtime, TrainingRuntime):
        # (a runtime loaded from the warm cache has no plan: the race timed its forwards and stored a choice)
        return "a training graph (its backward is not timed)"
    if options.cudagraphs:
        return "CUDA graphs replay it"
    # (the captured graph's inputs carry their fakes as example_value; the example inputs are real)
    if any(has_symbols(n.meta.get("example_value", n.meta.get("val"))) for n in gm.graph.nodes if n.op == "placeholder"):
        return SYMBOLIC_SIZES
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


class FastestOf:
    """Runs the candidates (name -> callable computing the same function) on the first calls and keeps
    the fastest; see the module docstring. ``in_one_call``: the graph has no side effects on its inputs,
    so the whole trial runs within the second call. ``warmups`` (name -> untimed runs before timing;
    default one) and ``check`` (name -> a function giving why the candidate cannot be used after its
    warm-up, or None) serve the CUDA-graph candidate; ``on_keep`` (the chosen name) lets it release
    what a candidate that lost holds, and may return the callable to run for the chosen one."""

    def __init__(self, candidates: dict, name: str, cuda: bool, in_one_call: bool = False,
                 warmups: dict | None = None, check: dict | None = None, on_keep=None):
        assert next(iter(candidates)) == "kiln" and "eager" in candidates
        self.candidates, self.name, self.cuda, self.in_one_call = dict(candidates), name, cuda, in_one_call
        self.warmups, self.check, self.on_keep = warmups or {}, check or {}, on_keep
        self.calls = 0
        self.times: dict[str, list[float]] = {k: [] for k in self.candidates}
        self.dropped: dict[str, str] = {}  # candidate -> why it was not timed
        self.chosen = None  # the chosen candidate's name once decided
        self.run = None  # the chosen callable
        self.on_decide = None  # called with the choice (``choice()``) once decided: the warm cache keeps it
        self.replayed = False  # the choice came from the warm cache (no calls were timed in this process)
        self.trial_seconds = 0.0  # what the race cost: its warm-ups and timed runs (explain reports it)

    @property
    def compiled(self):
        return self.candidates["kiln"]

    @property
    def eager(self):
        return self.candidates["eager"]

    def __call__(self, *args):
        if self.run is not None:
            return self.run(*args)
        self.calls += 1
        if self.calls == 1:
            return self.compiled(*args)
        if self.in_one_call:
            return self._trial(args)
        # one run per call: call 2 eager's warm-up, then eager and the generated code in turn
        if self.calls == 2:
            return self.eager(*args)
        which = "eager" if self.calls % 2 else "kiln"
        out = self._timed(which, args)
        if min(len(self.times["kiln"]), len(self.times["eager"])) >= TRIALS or self._clear_winner():
            self._decide()
        return out

    def _timed(self, which: str, args):
        if self.cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = self.candidates[which](*args)
        if self.cuda:
            torch.cuda.synchronize()
        self.times[which].append(time.perf_counter() - start)
        if not self.in_one_call:
            self.trial_seconds += self.times[which][-1]
        return out

    def _trial(self, args):
        start = time.perf_counter()
        for name in list(self.candidates)[1:]:
            for _ in range(self.warmups.get(name, 1)):
                out = self.candidates[name](*args)
            why = self.check[name]() if name in self.check else None
            if why is not None:
                self.dropped[name] = why
                del self.candidates[name], self.times[name]
        names = list(self.candidates)
        for rounds in range(1, TRIALS + 1):
            shift = rounds % len(names)
            for name in names[shift:] + names[:shift]:
                out = self._timed(name, args)
            if rounds >= EARLY and (self._clear_winner() or
                                    (time.perf_counter() - start > TRIAL_BUDGET_S and not self._close_call())):
                break
        self.trial_seconds = time.perf_counter() - start
        self._decide()
        return out

    def _clear_winner(self) -> bool:
        """After EARLY timed runs of each: every run of one was SEPARATION x faster than every run of each
        other, so more trials cannot change the choice (the race ends sooner)."""
        runs = list(self.times.values())
        if len(runs[0]) < EARLY or any(len(t) != len(runs[0]) for t in runs):
            return False
        best = min(runs, key=max)
        return all(max(best) * SEPARATION < min(t) for t in runs if t is not best)

    def _close_call(self) -> bool:
        """The medians so far put a choice within CLOSE of its threshold (replay against plain launches,
        eager against the generated code): the trial runs all TRIALS rounds, past its time budget."""
        medians = self._medians()
        best = medians.get("kiln")
        if best is None:
            return False
        if "graphs" in medians:
            if abs(medians["graphs"] / best - GRAPHS_MARGIN) < CLOSE:
                return True
            best = min(best, medians["graphs"])
        return "eager" in medians and abs(medians["eager"] / best - MARGIN) < CLOSE

    def _medians(self) -> dict:
        return {k: statistics.median(t) for k, t in self.times.items() if t}

    def _decide(self) -> None:
        medians = self._medians()
        self._choose(_pick(medians), medians)
        if self.on_decide is not None:
            self.on_decide(self.choice())

    def _choose(self, chosen: str, medians: dict) -> None:
        if chosen not in self.candidates:  # (a replayed choice this process cannot make: generated code)
            chosen = "kiln"
        self.chosen, self.medians = chosen, medians
        kept = self.on_keep(chosen) if self.on_keep is not None else None
        run = kept or self.candidates[chosen]
        settled = getattr(run, "settled", None)  # (a first-call wrapper whose work is done: call what it wraps)
        self.run = settled() if settled is not None else run
        stats.speed_choices[self.chosen] += 1
        if self.chosen == "eager":
            stats.aten_fallbacks[f"whole graph: eager was faster ({self.describe()})"] += 1

    def choice(self) -> dict:
        """The decision as the warm cache keeps it (``valid_choice`` checks one read back). A narrow eager
        win (eager not below KEEP_EAGER x the generated code's median) is kept as the best generated
        candidate: every later process would pay for one noisy race on a busy machine, and generated
        code is the default."""
        chosen, medians = self.chosen, self.medians
        if chosen == "eager":
            generated = {k: v for k, v in medians.items() if k in GENERATED}
            if not medians["eager"] < KEEP_EAGER * min(generated.values()):
                chosen = _pick(generated)
        return {"format": CHOICE_FORMAT, "chosen": chosen, "medians": dict(medians),
                "threads": torch.get_num_threads(), "cuda": self.cuda}

    def replay(self, choice: dict) -> None:
        """Take a decision made in an earlier process for the same graph (``valid_choice``): no race."""
        self.replayed = True
        self._choose(choice["chosen"], dict(choice["medians"]))

    def describe(self) -> str:
        if self.chosen is None:
            when = ("on its second call" if self.in_one_call else
                    f"over calls 3 to {2 + 2 * TRIALS} (the graph mutates its inputs: one run per call)")
            return (f"not decided yet: kiln times its code against eager ({', '.join(self.candidates)}) {when} "
                    f"and keeps the faster (Options.choose_faster / KILN_CHOOSE_FASTER=0 turns it off)")
        timed = ("timed in an earlier process, kept in the warm cache" if self.replayed
                 else f"median of {len(self.times['kiln'])} runs each")
        measured = ", ".join(f"{LABELS.get(k, k)} {v * 1e3:.3f} ms" for k, v in self.medians.items())
        dropped = "".join(f"; {LABELS.get(k, k)} not timed: {why}" for k, why in self.dropped.items())
        cost = ""
        if not self.replayed:
            where = "in its second call" if self.in_one_call else f"over calls 3 to {self.calls}"
            cost = f"; the race took {self.trial_seconds * 1e3:.1f} ms {where}"
        text = f"{self.name}: {LABELS.get(self.chosen, self.chosen)} runs ({timed}: {measured}{dropped}{cost})"
        runner = getattr(self.run, "explain", None) if self.chosen == "graphs" else None
        if callable(runner):  # the CUDA-graph runner's own report: recordings, their time, plain runs and why
            text += "\n" + runner()
        return text

    def __getattr__(self, name):
        return getattr(self.__dict__["candidates"]["kiln"], name)


LABELS = {"kiln": "generated code", "graphs": "generated code replayed from a CUDA graph", "eager": "eager"}


def _pick(medians: dict) -> str:
    """The candidate to run given each one's median: the best generated one (CUDA-graph replay only when
    GRAPHS_MARGIN faster than plain launches), unless eager is MARGIN faster than it."""
    best = "kiln" if "kiln" in medians else min(medians, key=medians.get)
    if "graphs" in medians and medians["graphs"] < GRAPHS_MARGIN * medians.get("kiln", float("inf")):
        best = "graphs"
    if "eager" in medians and best in medians and medians["eager"] < MARGIN * medians[best]:
        return "eager"
    return best


def valid_choice(choice, cuda: bool) -> str | None:
    """None when ``choice`` (read from a warm-cache entry) can be replayed here, else why it is stale: made
    by another version of the rule, with another number of CPU threads (what the timing depends on), or
    on another device."""
    if not isinstance(choice, dict) or choice.get("format") != CHOICE_FORMAT:
        return "another format"
    medians = choice.get("medians")
    if choice.get("chosen") not in LABELS or not isinstance(medians, dict) or "kiln" not in medians:
        return "malformed"
    if choice.get("threads") != torch.get_num_threads():
        return f"timed with {choice.get('threads')} CPU threads, {torch.get_num_threads()} now"
    if choice.get("cuda") != cuda:
        return "timed on another device"
    return None


def race(gm, example_inputs, runtime, options, warm=None, graphs=None):
    """``runtime`` wrapped in ``FastestOf`` against eager ``gm`` where ``should_race``; else itself.
    ``graphs`` (``default_graphs.GraphCandidate`` or None): the CUDA-graph candidate of a GPU inference
    graph. ``warm`` (the graph's ``WarmStart``): a valid choice kept in its entry is replayed without a
    race; otherwise the choice made here is kept in the entry."""
    why_not = should_race(gm, example_inputs, runtime, options)
    mutated = getattr(runtime, "mutated", None)
    in_one_call = mutated is not None and not mutated  # (unknown: as if it mutated)
    if why_not == SYMBOLIC_SIZES and graphs is not None and in_one_call:
        from kiln.backends.default_graphs import HotShapes

        return HotShapes(runtime, graphs)  # (raced per recurring shape: replay or plain launches)
    if why_not is not None:
        return runtime
    cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)
    candidates, extra = {"kiln": runtime, "eager": gm.forward}, {}
    if graphs is not None and in_one_call:
        candidates["graphs"] = graphs.candidate
        extra = {"warmups": {"graphs": graphs.WARMUPS}, "check": {"graphs": graphs.why_not}, "on_keep": graphs.keep}
    chooser = FastestOf(candidates, getattr(gm, "_get_name", lambda: "graph")(), cuda, in_one_call, **extra)
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
