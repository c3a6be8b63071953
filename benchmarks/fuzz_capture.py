"""Differential fuzzing of kiln's capture stage: random programs, eager vs kiln.compile(backend=eager).

    python benchmarks/fuzz_capture.py --n 500 --seed 0 --jobs 2 --out /tmp/fuzz-out

Generates programs ``seed .. seed+n-1`` (tests/fuzz/grammar.py), runs each eagerly and compiled
(tests/fuzz/runner.py), prints a table (programs, passed, wrong results, crashes, exceptions
mismatched, timeouts, single-graph rate, throughput) and a table of failure classes (status, what
differed, what eager raised), minimizes up to ``--per-class`` programs of each class
(tests/fuzz/minimize.py) and writes them to ``--out`` with the failure as a header comment, plus
``summary.json``. Each worker process runs its programs one after another with ``kiln.reset()``
between them (a subprocess per program would pay torch's and kiln's import, ~2 s, each time).
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _init_worker():
    import torch

    from tests.fuzz.runner import limit_memory

    torch.set_num_threads(1)
    limit_memory()
    warnings.simplefilter("ignore")
    os.environ.setdefault("KILN_CACHE_DIR", "/tmp/kiln-fuzz-cache")


def _run_one(seed: int):
    from tests.fuzz.runner import run_seed

    src, outcome = run_seed(seed)
    return seed, outcome


def _minimize_one(args):
    seed, budget = args
    from tests.fuzz.minimize import minimize
    from tests.fuzz.runner import run_seed, run_source

    src, outcome = run_seed(seed)
    sig = outcome.signature()
    try:
        small = minimize(src, lambda s: run_source(s, tag=f"min{seed}", timeout=5).signature() == sig,
                         budget=budget)
    except RecursionError:  # an edit made the program recurse without end: keep the unminimized one
        small = src
    try:
        final = run_source(small, tag=f"min{seed}")
    except RecursionError:  # (the minimized program left the worker's stack too deep: report the original)
        small, final = src, outcome
    return seed, outcome, small, final


def class_name(sig) -> str:
    status, part, eager_raised = sig
    return "_".join(x for x in (status, part.replace(":", "-"), eager_raised and f"eager-{eager_raised}") if x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)))
    ap.add_argument("--out", default="fuzz-out")
    ap.add_argument("--per-class", type=int, default=2, help="programs minimized per failure class")
    ap.add_argument("--budget", type=int, default=300, help="minimizer trials per program")
    ap.add_argument("--no-minimize", action="store_true")
    args = ap.parse_args(argv)

    seeds = range(args.seed, args.seed + args.n)
    start = time.perf_counter()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.jobs, initializer=_init_worker, maxtasksperchild=500) as pool:
        results = []
        for item in pool.imap_unordered(_run_one, seeds, chunksize=4):
            results.append(item)
            if len(results) % 250 == 0:
                bad = [seed for seed, o in results if o.failed]
                print(f"  ... {len(results)} programs, {len(bad)} failing {bad[:20]}, "
                      f"{time.perf_counter() - start:.0f}s", file=sys.stderr, flush=True)
        results.sort(key=lambda r: r[0])
        elapsed = time.perf_counter() - start
        by_class: dict = collections.defaultdict(list)
        for seed, o in results:
            if o.failed:
                by_class[o.signature()].append(seed)
        minimized = []
        if not args.no_minimize and by_class:
            todo = [(s, args.budget) for sig in by_class for s in by_class[sig][: args.per_class]]
            minimized = list(pool.imap_unordered(_minimize_one, todo))
    report(results, by_class, minimized, elapsed, args)
    return 0


def report(results, by_class, minimized, elapsed, args) -> None:
    outcomes = [o for _, o in results]
    count = collections.Counter(o.status for o in outcomes)
    n = len(outcomes)
    single = sum(o.single_graph for o in outcomes)
    rows = [
        ("programs", n), ("passed", count["pass"]), ("wrong results", count["wrong"]),
        ("crashes", count["crash"]), ("exceptions mismatched", count["exception"]), ("timeouts", count["timeout"]),
        ("eager raised (call A)", sum(bool(o.eager_raised) for o in outcomes)),
        ("single-graph rate", f"{single / max(n, 1):.1%}"),
        ("graphs (call A, mean)", f"{sum(o.graphs for o in outcomes) / max(n, 1):.2f}"),
        ("graph breaks (total)", sum(o.breaks for o in outcomes)),
        ("frames run eagerly (total)", sum(o.fallbacks for o in outcomes)),
        ("seconds", f"{elapsed:.1f}"), ("programs/minute", f"{60 * n / max(elapsed, 1e-9):.0f}"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"kiln capture fuzz: seeds {args.seed}..{args.seed + args.n - 1}, {args.jobs} jobs")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    if by_class:
        print("\nfailure classes (status, what differed, what eager raised): count, first seeds")
        for sig, seeds in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
            print(f"  {class_name(sig):<45} {len(seeds):>5}  {seeds[:8]}")
    reasons = collections.Counter(r for o in outcomes for r in o.fallback_reasons)
    if reasons:
        print("\ncommonest graph-break / eager-fallback reasons (programs):")
        for r, k in reasons.most_common(10):
            print(f"  {k:>5}  {r[:110]}")
    os.makedirs(args.out, exist_ok=True)
    for seed, o, small, final in sorted(minimized, key=lambda m: m[0]):
        name = os.path.join(args.out, f"{class_name(o.signature())}_seed{seed}.py")
        header = "\n".join("# " + ln for ln in (f"seed {seed}: {o.status} ({o.part})",
                                                  *final.detail.splitlines()[:20]))
        with open(name, "w") as fh:
            fh.write(header + "\n" + small + "\n")
    if minimized:
        print(f"\nminimized programs written to {args.out}/")
    summary = {
        "seeds": [args.seed, args.seed + args.n], "elapsed_s": elapsed, "table": dict(rows),
        "classes": {class_name(sig): seeds for sig, seeds in by_class.items()},
    }
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
