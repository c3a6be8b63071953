"""Where a compiled graph's time goes on the CPU: every statement of kiln's generated wrapper timed
(generated C++ kernels, library calls, allocations, layout checks), next to eager's ATen ops as
torch.profiler sees them.

    PYTHONPATH=$PWD python benchmarks/cpu_kernel_times.py hf_gpt2_124m --threads 1 [--size small] [--top 25]

Cases are those of ``benchmarks/cpu.py`` (``--cases`` names). The timed wrapper is the generated source
with a clock read after every statement (``Wrapper.compile`` is patched in this process only), so
the per-statement times include the Python of the call (a few microseconds each). Eager's time per ATen
op is torch.profiler's self CPU time, summed over the op's calls.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMES: collections.Counter = collections.Counter()  # (graph, line number, statement) -> seconds
CALLS: collections.Counter = collections.Counter()
_STATEMENT = re.compile(r"^    (?!return|def )\S")


def instrumented(source: str, graph: int) -> str:
    """``source`` with each top-level statement of ``call`` followed by a clock read."""
    out = []
    lines = source.splitlines()
    for i, line in enumerate(lines):
        out.append(line)
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.startswith("def call("):
            out.append("    _t = _clock()")
        elif _STATEMENT.match(line) and not nxt.startswith("        "):
            code, _, note = line.strip().partition("  # ")
            key = (graph, i, code[:110] + ("  # " + note if note else ""))
            out.append(f"    _n = _clock(); _times[{key!r}] += _n - _t; _t = _n")
    return "\n".join(out)


def patch_wrapper() -> None:
    from kiln.codegen import wrapper_runtime

    counter = iter(range(10 ** 6))

    def compile_timed(self):
        graph = next(counter)
        ns = dict(self.namespace, _clock=time.perf_counter, _times=TIMES)
        exec(compile(instrumented(self.source, graph), f"<kiln wrapper {graph}>", "exec"), ns)
        return ns["call"]

    wrapper_runtime.Wrapper.compile = compile_timed


def eager_op_times(f, args, calls: int) -> list[tuple[str, float, int]]:
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            f(*args)
    rows = [(e.key, e.self_cpu_time_total / 1e6 / calls, e.count // calls) for e in prof.key_averages()]
    return sorted(rows, key=lambda r: -r[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case")
    parser.add_argument("--size", default="default")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("KILN_CHOOSE_FASTER", "0")  # the generated code runs (not eager's graph)
    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from cpu import build

    import kiln

    patch_wrapper()
    _, f, fargs, desc = build(args.case, args.size)
    with torch.no_grad():
        compiled = kiln.compile(f)
        for _ in range(3):
            compiled(*fargs)
            f(*fargs)
        TIMES.clear()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            compiled(*fargs)
        kiln_s = (time.perf_counter() - t0) / args.calls
        t0 = time.perf_counter()
        for _ in range(args.calls):
            f(*fargs)
        eager_s = (time.perf_counter() - t0) / args.calls
        eager = eager_op_times(f, fargs, args.calls)
    inside = sum(TIMES.values()) / args.calls
    print(f"{args.case} {desc}: kiln {kiln_s * 1e3:.3f} ms per call ({inside * 1e3:.3f} ms in wrapper statements), "
          f"eager {eager_s * 1e3:.3f} ms; threads {args.threads}")
    print(f"\nkiln wrapper statements, ms per call (top {args.top}):")
    by_kind = collections.Counter()
    for (graph, line, text), s in TIMES.items():
        kind = text.split("  # ")[-1].strip() if "  # " in text else text.split("(")[0].split("=")[-1].strip()
        by_kind[re.sub(r"_\d+$", "", kind)] += s / args.calls
    for (graph, line, text), s in TIMES.most_common(args.top):
        print(f"  {s / args.calls * 1e3:8.3f}  g{graph}:{line:<4} {text}")
    print("\nkiln by kind, ms per call:")
    for kind, s in by_kind.most_common(args.top):
        print(f"  {s * 1e3:8.3f}  {kind}")
    print(f"\neager ATen ops (self CPU), ms per call (top {args.top}):")
    for name, s, n in eager[:args.top]:
        print(f"  {s * 1e3:8.3f}  {name} x{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
