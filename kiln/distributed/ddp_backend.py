"""The backend wrapper that splits graphs compiled inside a DistributedDataParallel forward.

``ddp_aware(backend, options)`` returns a backend. Called while a DDP module's forward runs (DDP
sets ``DistributedDataParallel._active_ddp_module`` around its wrapped module's call, whichever of
``kiln.compile(DDP(m))`` or ``DDP(kiln.compile(m))`` was written), it plans DDP's buckets over the
graph, splits it (``ddp_split``) and returns a ``SplitGraph``: it runs the pieces in order, each
compiled by the backend on its first call (with the real values reaching it), each its own autograd
Function. Anywhere else it is the backend itself.
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch
import torch.fx as fx

from kiln.debug.stats import stats
from kiln.distributed.consistency import compile_or_eager, ddp_agreement_timeout, fsdp_forward_running
from kiln.distributed.ddp_split import (CutChecker, Piece, body_nodes, place_cuts, plan_buckets, read_attr,
                                       split_graph)


def active_ddp_module():
    """The DistributedDataParallel module whose forward is running, or None."""
    if not torch.distributed.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    getter = getattr(DistributedDataParallel, "_get_active_ddp_module", None)
    return getter() if getter is not None else None


def bucket_caps(ddp) -> tuple[int, int]:
    """(bucket_bytes_cap, first_bucket_bytes_cap) of a DDP module, as its reducer uses them."""
    cap = int(ddp.bucket_bytes_cap)
    config = getattr(ddp, "_bucket_config", None)
    if config is not None and getattr(ddp, "bucket_bytes_cap_default", False):
        return cap, int(config.first_bucket_bytes_cap)
    if config is not None:
        return cap, cap
    default_first = getattr(torch.distributed, "_DEFAULT_FIRST_BUCKET_BYTES", cap)
    return cap, min(cap, default_first)


def reduced_parameters(ddp) -> set[int]:
    """ids of the parameters DDP all-reduces."""
    ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    return {id(p) for name, p in ddp.module.named_parameters() if p.requires_grad and name not in ignored}


def why_not_split(ddp, gm: fx.GraphModule) -> str | None:
    if getattr(ddp, "_use_python_reducer", False):
        return "DDP uses its Python reducer (compiled autograd)"
    if getattr(ddp, "_delay_all_reduce_all_params", False):
        return "DDP delays the all-reduce of all parameters to the end of the backward"
    if not torch.is_grad_enabled():
        return "grad mode is off (no backward to overlap)"
    if gm.meta.get("kiln_shape_env") is not None:
        return "the graph has symbolic sizes"
    if any(n.op == "call_module" for n in gm.graph.nodes):
        return "the graph calls submodules"
    return None


def ddp_aware(backend: Callable, options) -> Callable:
    """``backend``, splitting graphs at DDP bucket boundaries where a DDP forward is running."""

    def compile_graph(gm, example_inputs):
        ddp = active_ddp_module() if options.ddp_split else None
        if ddp is None:
            in_step = active_ddp_module() is not None or fsdp_forward_running()  # every rank compiles it
            timeout = ddp_agreement_timeout(options) if in_step else None
            return compile_or_eager(backend, gm, example_inputs, options, agreement_timeout=timeout)
        return compile_split(backend, gm, example_inputs, ddp, options)

    compile_graph.__name__ = getattr(backend, "__name__", "backend")
    compile_graph.kiln_dynamic = getattr(backend, "kiln_dynamic", False)
    compile_graph.kiln_wrapped = backend
    return compile_graph


def compile_split(backend: Callable, gm: fx.GraphModule, example_inputs, ddp, options=None) -> Callable:
    """Plan and split; a SplitGraph, or the backend's own result where no cut is made."""
    reason = why_not_split(ddp, gm)
    notes: list[str] = []
    pieces: list[Piece] = []
    if reason is None:
        bucket_cap, first_cap = bucket_caps(ddp)
        reduced = reduced_parameters(ddp)
        buckets = plan_buckets(gm, bucket_cap, first_cap, lambda p: id(p) in reduced)
        checker = CutChecker(gm, torch.is_grad_enabled())
        cuts, notes = place_cuts(buckets, checker)
        pieces = split_graph(gm, cuts, buckets, checker.recomputable)
        header = f"DDP split (bucket_bytes_cap={bucket_cap}, first bucket {first_cap}): {len(pieces)} piece(s)"
    else:
        header = f"DDP split: not split ({reason})"
    if len(pieces) <= 1:
        agreed = compile_or_eager(backend, gm, example_inputs, options, agreement_timeout=ddp_agreement_timeout(options))
        return Noted(agreed, header, notes)
    stats.ddp_pieces += len(pieces)
    return SplitGraph(gm, pieces, backend, header, notes, options)


class Noted:
    """A backend's result with the DDP split's note in front of its explain report."""

    def __init__(self, fn: Callable, header: str, notes: list[str]):
        self.fn, self.header, self.notes = fn, header, notes

    def __call__(self, *args):
        return self.fn(*args)

    def kiln_explain(self) -> str:
        report = getattr(self.fn, "kiln_explain", None)
        return "\n".join([self.header, *("  " + n for n in self.notes), report() if callable(report) else ""])


class SplitGraph:
    """Runs the pieces of a split graph in order; piece i is compiled by the backend on its first
    call. A piece the backend fails on runs as its FX graph (exact; a warning says why), on this rank,
    so no rank stops while the others wait in a collective."""

    def __init__(self, gm: fx.GraphModule, pieces: list[Piece], backend: Callable, header: str, notes: list[str],
                 options=None):
        self.gm, self.pieces, self.backend, self.options = gm, pieces, backend, options
        self.header, self.notes = header, notes
        self.compiled: list[Callable | None] = [None] * len(pieces)
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.output = next(n for n in gm.graph.nodes if n.op == "output")
        # after piece i, the values no later piece (nor the output) needs are dropped
        last = {}
        for i, piece in enumerate(pieces):
            for node in piece.inputs:
                last[node] = i
        self.drop_after = [[n for n, i in last.items() if i == k and not _in_output(self.output, n)]
                           for k in range(len(pieces))]

    def __call__(self, *args):
        env = dict(zip(self.placeholders, args))
        for i, piece in enumerate(self.pieces):
            inputs = [env[n] for n in piece.inputs]
            fn = self.compiled[i] or self._compile(i, inputs)
            results = fn(*inputs)
            env.update(zip(piece.outputs, results))
            for node in self.drop_after[i]:
                env.pop(node, None)
        return tuple(fx.map_arg(self.output.args[0], lambda n: env[n] if n in env else read_attr(self.gm, n.target)))

    def _compile(self, i: int, inputs: list) -> Callable:
        piece = self.pieces[i]
        try:
            fn = compile_or_eager(self.backend, piece.gm, inputs, self.options, what=f"DDP piece {i}",
                                  agreement_timeout=ddp_agreement_timeout(self.options))
        except Exception as exc:  # noqa: BLE001 - run this piece as its graph: exact, and no rank stops
            reason = f"DDP piece {i}: backend failed: {type(exc).__name__}: {str(exc)[:200]}"
            stats.eager_fallbacks[reason] += 1
            warnings.warn(f"kiln: {reason}; the piece runs as its FX graph", stacklevel=2)
            fn = piece.gm
        self.compiled[i] = fn
        return fn

    def kiln_explain(self) -> str:
        lines = [self.header]
        if len(self.pieces) > 1:
            for i, piece in enumerate(self.pieces):
                nodes = body_nodes(piece.gm)
                lines.append(f"  piece {i}: {len(nodes)} nodes, {len(piece.inputs)} inputs, "
                             f"{len(piece.outputs)} outputs; bucket of {len(piece.params)} "
                             f"parameter(s), {piece.nbytes} bytes: {', '.join(piece.params) or '-'}")
        lines += ["  " + note for note in self.notes]
        for i, fn in enumerate(self.compiled):
            report = getattr(fn, "kiln_explain", None)
            if callable(report):
                lines.append(f"piece {i}:")
                lines += ["  " + line for line in report().splitlines()]
        return "\n".join(lines)


def _in_output(output: fx.Node, node: fx.Node) -> bool:
    found = []
    fx.map_arg(output.args, lambda n: found.append(n))
    return node in found
