"""Functional collectives inside compiled code, run on every rank (tests/distributed/test_collectives.py)."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

import kiln


def reduce_twice(x, w):
    y = x * w
    unused = fc.all_reduce(y, "sum", dist.group.WORLD)  # noqa: F841 - every rank must still run it
    a = fc.all_reduce(y, "sum", dist.group.WORLD)
    b = fc.all_reduce(y, "sum", dist.group.WORLD)
    return (a * b).sum()


def gather_and_scatter(x):
    y = x * 2
    z = fc.all_gather_tensor(y, 1, dist.group.WORLD)
    w = fc.reduce_scatter_tensor(y.repeat(1, 2) + 1, "sum", 1, dist.group.WORLD)
    v = fc.wait_tensor(fc.all_gather_tensor(y, 0, dist.group.WORLD))
    return z + 1, w, v


def in_place_all_reduce(x):
    y = x * 2
    dist.all_reduce(y)
    dist.all_reduce(y, op=dist.ReduceOp.MAX, group=dist.group.WORLD)
    return y + 1


def rank_dependent(x):
    """The default group's rank and size are constants of the graph (no break, a value per rank)."""
    scale = dist.get_rank() + 1
    return x * scale / dist.get_world_size(group=None) + dist.get_rank(dist.group.WORLD)


def async_all_reduce(x):
    y = x * 2
    work = dist.all_reduce(y, async_op=True)  # a Work object: the graph breaks here
    work.wait()
    return y + 1


def run(rank, world_size, backends):
    return {backend: run_backend(rank, backend) for backend in backends}


def run_backend(rank, backend):
    out = {}
    x = torch.arange(6.).reshape(2, 3) + rank
    w_compiled, w_eager = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    for name, fn, args, ref_args in [
        ("reduce_twice", reduce_twice, (x, w_compiled), (x, w_eager)),
        ("gather_and_scatter", gather_and_scatter, (x,), (x,)),
        ("in_place_all_reduce", in_place_all_reduce, (x,), (x,)),
        ("rank_dependent", rank_dependent, (x,), (x,)),
        ("async_all_reduce", async_all_reduce, (x,), (x,)),
    ]:
        kiln.stats.reset()
        got = kiln.compile(fn, backend=backend)(*args)
        want = fn(*ref_args)
        if name == "reduce_twice":
            got.backward()
            want.backward()
            got, want = (got, w_compiled.grad), (want, w_eager.grad)
        got = [t.detach().clone() for t in (got if isinstance(got, tuple) else (got,))]
        want = [torch.Tensor(t).detach().clone() if type(t) is not torch.Tensor else t.detach().clone()
                for t in (want if isinstance(want, tuple) else (want,))]
        out[name] = {"got": got, "want": want, "graphs": kiln.stats.graphs,
                     "breaks": dict(kiln.stats.graph_breaks), "fallbacks": dict(kiln.stats.eager_fallbacks)}
    return out
