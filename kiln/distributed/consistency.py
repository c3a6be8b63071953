"""No rank stops while the others wait: compile failures under torch.distributed.

On one process a backend failure is raised (BackendError). With several ranks that would stop one rank
while the others wait for it in their next collective, until the process group's timeout. So where a
process group of more than one rank is initialized, ``compile_or_eager`` answers a failed compile with
the captured FX graph itself, which runs op by op as eager would, issuing the same collectives in the
same order (a warning and ``kiln.stats.eager_fallbacks`` say so): every rank goes on, and results are
eager's.

With ``Options.distributed_agreement_timeout`` > 0 the ranks also agree, graph by graph, through the
process group's store: each posts whether its compile succeeded under a key made from the graph's code
and how many graphs with that code it compiled before, then waits (up to the timeout) for the others'.
If any failed, or did not post in time (it compiled something else), this rank runs the graph eagerly
too: the same graphs on all ranks, or eager on all. It is off by default for graphs in general: a rank
that alone compiles a graph (an evaluation only rank 0 runs) would wait the whole timeout. A separate
option (``Options.ddp_agreement_timeout``, at most half the process group's timeout; 0, off, by default
until it has run on NCCL GPUs) covers graphs compiled inside a DistributedDataParallel forward, DDP pieces
included, or inside the forward of a module sharded with FSDP2: there every rank runs the same module on
its batch, so every rank compiles the same graphs in the same order, and waiting costs only the
difference of their compile times.
"""
from __future__ import annotations

import datetime
import hashlib
import re
import sys
import warnings
import weakref
from typing import Callable

import torch

from kiln.debug.stats import stats
from kiln.errors import Unsupported
from kiln.fake.symbolic import SpecializationError

_POSTED: dict[str, int] = {}  # graph digest -> graphs with that code this process has agreed on


def world_size() -> int:
    """The default process group's size; 1 without one."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size()


def compile_or_eager(backend: Callable, gm, example_inputs, options, what: str = "graph",
                     agreement_timeout: float | None = None) -> Callable:
    """``backend(gm, example_inputs)``, or ``gm`` itself (eager) where it fails on this rank (or, with
    agreement on, on any rank). Without a multi-rank process group, failures are raised as before.
    ``agreement_timeout``: seconds to wait for the other ranks' word on this graph (None: the option
    ``distributed_agreement_timeout``; 0: no agreement)."""
    if world_size() <= 1:
        return backend(gm, example_inputs)
    failure = None
    timeout = getattr(options, "distributed_agreement_timeout", 0.0) if agreement_timeout is None else agreement_timeout
    try:
        compiled = backend(gm, example_inputs)
    except (Unsupported, SpecializationError):
        if timeout > 0:  # this rank runs it eagerly: so do the others
            agree(_digest(gm), False, timeout)
        raise  # the frame runs eagerly / the user's error (a dim marked dynamic), as on one process
    except Exception as exc:  # noqa: BLE001 - never stop one rank alone
        failure = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if timeout > 0:
        agreed = agree(_digest(gm), failure is None, timeout)
        if failure is None and not agreed:
            failure = "another rank did not compile the same graph"
    if failure is None:
        return compiled
    reason = f"distributed: {what} runs eagerly on this rank: {failure}"
    stats.eager_fallbacks[reason] += 1
    warnings.warn(f"kiln: {reason}", stacklevel=3)
    return gm


def ddp_agreement_timeout(options) -> float:
    """Seconds ranks wait to agree on a graph compiled inside a DDP (or FSDP2) forward: there every rank
    compiles the same graphs in the same order (DDP runs the same module on each), so waiting costs only the
    difference of the ranks' compile times, and a rank whose compile fails takes every rank to eager.
    Capped at half the process group's timeout, so that a rank that compiled something else (it waits
    the whole time) is back before the others' next collective gives up on it."""
    timeout = max(getattr(options, "distributed_agreement_timeout", 0.0), getattr(options, "ddp_agreement_timeout", 0.0))
    if timeout <= 0 or world_size() <= 1:
        return 0.0
    from torch.distributed import distributed_c10d as c10d

    try:
        group_timeout = c10d._get_default_store().timeout.total_seconds()
    except Exception:  # noqa: BLE001 - no store timeout to read: the option as it is
        return timeout
    return min(timeout, group_timeout / 2) if group_timeout > 0 else timeout


def fsdp_forward_running() -> bool:
    """Whether the forward of a module sharded with FSDP2's ``fully_shard`` is running (its state is in
    ``TrainingState.FORWARD`` between its pre- and post-forward hooks): every rank runs that forward
    in step (its parameters were just all-gathered), so every rank compiles the same graphs there. False
    where torch has no FSDP2 or keeps its state elsewhere."""
    fsdp_state = sys.modules.get("torch.distributed.fsdp._fully_shard._fsdp_state")  # (imported by fully_shard)
    composable = sys.modules.get("torch.distributed._composable_state")
    state_type = getattr(fsdp_state, "FSDPState", None)
    if state_type is None or composable is None or world_size() <= 1:
        return False  # no FSDP2 in use (or another torch): no agreement by default, it stays opt-in
    mapping = getattr(composable, "_module_state_mapping", {})
    for state in list(mapping.values()):
        state = state() if isinstance(state, weakref.ref) else state  # (torch keeps weak references)
        if isinstance(state, state_type) and getattr(getattr(state, "_training_state", None), "name", "") == "FORWARD":
            return True
    return False


_DEVICE_INDEX = re.compile(r"(device\(type='[a-z]+', index=)\d+|('[a-z]+:)\d+'")


def _digest(gm) -> str:
    """The graph's code, the same on every rank: each rank's own device index (`cuda:1` on rank 1) is
    left out (on 2 GPUs the digests differed, and every rank waited out the timeout)."""
    code = _DEVICE_INDEX.sub(lambda m: (m.group(1) or m.group(2)) + "N" + ("" if m.group(1) else "'"), gm.code)
    return hashlib.sha256(code.encode()).hexdigest()[:20]


def agree(digest: str, ok: bool, timeout: float) -> bool:
    """Post this rank's result for the graph and wait for every rank's: True only if all succeeded."""
    from torch.distributed import distributed_c10d as c10d

    dist = torch.distributed
    count = _POSTED.get(digest, 0)
    _POSTED[digest] = count + 1
    store = c10d._get_default_store()
    rank, size = dist.get_rank(), dist.get_world_size()
    prefix = f"kiln/agree/{digest}/{count}/"
    store.set(prefix + str(rank), b"1" if ok else b"0")
    others = [prefix + str(r) for r in range(size) if r != rank]
    try:
        store.wait(others, datetime.timedelta(seconds=timeout))
    except Exception:  # noqa: BLE001 - a rank that did not post in time: eager here
        store.set(prefix + str(rank), b"0")  # a late rank then sees the failure and goes eager too
        return False
    return ok and all(store.get(key) == b"1" for key in others)
