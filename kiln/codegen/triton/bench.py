"""Timing a few candidate launches of one kernel against each other (autotuning), cheaply.

``time_each(fns)`` returns each callable's median time in milliseconds (None where it raised). It
replaces ``triton.testing.do_bench(fn, warmup=5, rep=25)`` per candidate, which spends about 30 ms of
GPU time on each one however short the kernel: with a few candidates for each of a model's large
kernels that was 2-3 s of every cold compile (BERT-base, H200). Here:

- every candidate runs once first (its binary loads; a candidate that raises is dropped);
- then ``ROUNDS`` rounds, each launching every candidate once, in rotating order, with the L2 cache
  flushed before each launch (as ``do_bench`` does: a kernel must not be timed on data the previous
  launch left in L2) and a pair of CUDA events around the launch alone;
- each candidate's time is the median of its rounds.

One synchronization at the end; the GPU time spent is ROUNDS x (flush + kernel) per candidate, about
1-2 ms for the kernels that are tuned (those over ``TUNE_MIN_ELEMENTS``). Choices between candidates
within a few percent of each other may differ from a longer timing's; those are the choices that do
not matter.

Off the GPU (tests run Triton's interpreter on CPU tensors) the same protocol runs with wall-clock time.
"""
from __future__ import annotations

import statistics
import time

ROUNDS = 7  # timed launches of each candidate
FLUSH_BYTES = 256 << 20  # larger than any GPU's L2 cache (H100: 50 MB)


def time_each(fns, device=None, rounds: int = ROUNDS) -> list:
    """Median milliseconds of each of ``fns`` (callables launching one kernel each), None where it raised."""
    alive = []
    for i, fn in enumerate(fns):
        try:
            fn()
        except Exception:  # a config that does not compile (too many registers) is skipped
            continue
        alive.append(i)
    samples: dict[int, list] = {i: [] for i in alive}
    if alive:
        cuda = device is not None and getattr(device, "type", device) == "cuda"
        (_time_cuda if cuda else _time_wall)(fns, alive, samples, rounds, device)
    return [statistics.median(samples[i]) if samples.get(i) else None for i in range(len(fns))]


def _in_rounds(alive, rounds):
    """The candidates' indices, ``rounds`` times, each round starting one later (rotating order)."""
    for r in range(rounds):
        shift = r % len(alive)
        yield from alive[shift:] + alive[:shift]


def _time_cuda(fns, alive, samples, rounds, device) -> None:
    import torch

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)  # (the caching allocator keeps it)
    events = []
    for i in _in_rounds(alive, rounds):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fns[i]()
        end.record()
        events.append((i, start, end))
    torch.cuda.synchronize(device)
    for i, start, end in events:
        samples[i].append(start.elapsed_time(end))


def _time_wall(fns, alive, samples, rounds, device) -> None:
    for i in _in_rounds(alive, rounds):
        start = time.perf_counter()
        fns[i]()
        samples[i].append((time.perf_counter() - start) * 1e3)

