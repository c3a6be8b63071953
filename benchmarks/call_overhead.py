"""Host cost per call of one-kernel graphs, eager vs kiln's default backend, and kiln's pieces: the guard
check and the compiled graph's call (runtime, wrapper, launch), and a cProfile of the whole call. (A cache
hit is found by the C hook, which runs the guard check itself: the rest of kiln's cost over the graph call
is the hook and the substitute frame.)

    python benchmarks/call_overhead.py [--device cuda|cpu] [--calls 3000] [--profile] [case ...]

Each number is the best of 5 runs of ``--calls`` back-to-back calls (synchronized once at the end), in
microseconds per call. Cases: index_select, embedding, add_relu, gather (sizes of the families benchmark),
mlp12 (a 12-layer MLP module: 24 parameters guarded per call), tiny_index_select (host cost only). Runs
under torch.no_grad().
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import timeit

import torch

import kiln
from kiln.capture import tensor_guard_build


def cases(dev: str) -> dict:
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(dev)

    def ints(high, *shape):
        return torch.randint(0, high, shape, generator=g).to(dev)

    return {
        "index_select": (lambda x, i: torch.index_select(x, 0, i), (rand(4096, 768), ints(4096, 512))),
        "embedding": (lambda i, w: torch.nn.functional.embedding(i, w), (ints(30522, 8, 128), rand(30522, 768))),
        "add_relu": (lambda x, y: (x + y).relu(), (rand(1024, 1024), rand(1024, 1024))),
        "gather": (lambda x, i: torch.gather(x, 1, i), (rand(1024, 512), ints(512, 1024, 64))),
        # a module: its 24 parameters are guarded on every call (held tensors)
        "mlp12": (torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(12)]).to(dev), (rand(8, 64),)),
        "tiny_index_select": (lambda x, i: torch.index_select(x, 0, i), (rand(8, 4), ints(8, 2))),
    }


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def per_call_us(fn, args, calls: int, dev: str) -> float:
    fn(*args)
    sync(dev)
    best = float("inf")
    for _ in range(5):
        t = timeit.timeit(lambda: fn(*args), number=calls)
        sync(dev)
        best = min(best, t / calls * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of kiln's calls")
    a = parser.parse_args()
    table = cases(a.device)
    torch.set_grad_enabled(False)
    first = True
    for name in a.cases or list(table):
        fn, args = table[name]
        compiled = kiln.compile(fn)
        if first:  # guards read tensors through the library built at the first compile (once per machine)
            ready = tensor_guard_build.wait(300)
            print(f"tensor guard library: {tensor_guard_build.status()}" + ("" if ready else " (attribute reads)"))
            first = False
        for _ in range(300):  # past the speed race
            compiled(*args)
        sync(a.device)
        callback = kiln.api.config_of(compiled).compiler
        code = (fn.forward if isinstance(fn, torch.nn.Module) else fn).__code__
        entry = callback.cache.get(code)[0]
        graph = next(c for c in entry.code.co_consts if type(c).__module__.startswith("kiln"))
        if isinstance(fn, torch.nn.Module):
            L, G = {"self": fn, "input": args[0]}, type(fn).forward.__globals__
        else:
            L, G = dict(zip(code.co_varnames, args)), fn.__globals__
        B = G["__builtins__"]
        if isinstance(B, type(torch)):
            B = B.__dict__
        print(f"== {name} ({a.device}): kiln ran {getattr(graph, 'chosen', None) or 'its kernels'}")
        print(f"   eager {per_call_us(fn, args, a.calls, a.device):.2f} us   "
              f"kiln {per_call_us(compiled, args, a.calls, a.device):.2f} us")
        print(f"   guard check {per_call_us(lambda: entry.guards.check(L, G, None, B), (), a.calls, a.device):.2f} us"
              + (f"   graph call {per_call_us(graph, args, a.calls, a.device):.2f} us"
                 if not isinstance(fn, torch.nn.Module) else ""))
        if a.profile:
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(a.calls):
                compiled(*args)
            profile.disable()
            sync(a.device)
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(20)
            print(out.getvalue())


if __name__ == "__main__":
    main()
