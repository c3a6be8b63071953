"""Run a function on 2 CPU processes joined by a gloo process group, and collect what each returns.

``run_ranks(fn, **kwargs)``: ``fn(rank, world_size, **kwargs)`` (a module-level function, so spawn can
pickle it) runs on every rank after ``init_process_group("gloo")`` (``process_group="nccl"``: one GPU
per rank) with a file:// store in a fresh
temporary directory; its result (anything torch.save takes) comes back per rank. A rank that raises
fails the call with its traceback; ranks still running after ``timeout`` seconds are killed and the
call fails with "hang", so a test can tell a hang from an error.
"""
from __future__ import annotations

import datetime
import os
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD_SIZE = 2


class RanksHung(AssertionError):
    pass


def _entry(rank, fn, world_size, init_file, result_dir, kwargs, backend):
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    torch.set_num_threads(1)
    try:
        result = {"ok": fn(rank, world_size, **kwargs)}
    except BaseException:  # noqa: BLE001 - handed back to the test
        result = {"error": traceback.format_exc()}
    torch.save(result, os.path.join(result_dir, f"rank{rank}.pt"))
    if "error" not in result:
        dist.destroy_process_group()


def run_ranks(fn, world_size: int = WORLD_SIZE, timeout: float = 120.0, process_group: str = "gloo",
              **kwargs) -> list:
    tmp = tempfile.mkdtemp(prefix="kiln-dist-")
    context = mp.start_processes(_entry, args=(fn, world_size, os.path.join(tmp, "init"), tmp, kwargs, process_group),
                                 nprocs=world_size, join=False, start_method="spawn")
    deadline = timeout
    try:
        while not context.join(timeout=1.0):
            deadline -= 1.0
            if deadline <= 0:
                raise RanksHung(f"ranks still running after {timeout} s (a hang)")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    results = []
    for rank in range(world_size):
        result = torch.load(os.path.join(tmp, f"rank{rank}.pt"), weights_only=False)
        if "error" in result:
            raise AssertionError(f"rank {rank} failed:\n{result['error']}")
        results.append(result["ok"])
    return results


def max_difference(a_params, b_params) -> float:
    return max((a.detach() - b.detach()).abs().max().item() for a, b in zip(a_params, b_params))


def two_gpus() -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() >= 2 and dist.is_nccl_available()


def section(cpu_ranks, name):
    per_rank = [r[name] for r in cpu_ranks]
    for rank, result in enumerate(per_rank):
        if "error" in result and isinstance(result["error"], str):
            raise AssertionError(f"rank {rank}, section {name} failed:\n{result['error']}")
    return per_rank
