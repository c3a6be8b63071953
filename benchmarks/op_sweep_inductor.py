"""What torch.compile's Inductor did with each op of the sweep: graphs, graph breaks, and extern kernels.

Inductor runs an op without a lowering as an extern kernel (``ir.FallbackKernel`` for
``fallback_handler`` and ``make_fallback`` ops, ``ScatterFallback``, ``IndexPutFallback``, ...), and
its library calls (``extern_kernels.mm``, convolution, random seeds) as extern kernels too. This
module records, per sample, every extern kernel left in Inductor's scheduler (after dead code
elimination) as ``"op: inductor class"`` -- the same ``"op: reason"`` form kiln's records have, so
``op_sweep_report.is_library_call`` sorts both compilers' calls into library calls and fallbacks by
one rule -- and how many graphs dynamo captured and how many graph breaks it made.

This is benchmark code: it reads torch._inductor internals (kiln itself never does).
"""
from __future__ import annotations

# extern kernel classes that are no ATen call of their own: pieces of another kernel's output,
# runtime assertions, views of complex tensors, copies between devices
NOT_CALLS = ("MultiOutput", "AllocatingMultiOutput", "AssertScalar", "ComplexView", "DeviceCopy",
             "TMADescriptor", "TMADescriptorExperimental", "TMADescriptorStable")

_current: list = []  # while a sample runs: [True, its extern kernels]
_installed = [False]


def extern_name(node) -> str:
    """``"aten.op.overload: Class"`` for one of Inductor's extern kernels ("" when it is no ATen call)."""
    kind = type(node).__name__
    if kind in NOT_CALLS:
        return ""
    op = getattr(node, "op_overload", None)
    name = str(op) if op is not None else ""
    if not name:
        python_name = str(getattr(node, "python_kernel_name", None) or "")
        # "extern_kernels.mm" -> "aten.mm.out"; "torch.ops.aten.sort.stable" -> "aten.sort.stable"
        if python_name.startswith("extern_kernels."):
            name = f"aten.{python_name.split('.', 1)[1]}.out"
        else:
            name = python_name.removeprefix("torch.ops.") or kind
    return f"{name}: {kind}"


def _record_scheduler(scheduler) -> None:
    import torch._inductor.ir as ir

    if not _current:
        return
    for node in scheduler.nodes:
        for sub in node.get_nodes():
            if isinstance(getattr(sub, "node", None), ir.ExternKernel):
                name = extern_name(sub.node)
                if name:
                    _current[1].append(name)


def install() -> None:
    """Hook Inductor's scheduler (once per process) and turn off the caches that would skip it."""
    if _installed[0]:
        return
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    import torch._inductor.scheduler as scheduler_module

    inductor_config.fx_graph_cache = False  # a cache hit skips lowering: nothing would be recorded
    functorch_config.enable_autograd_cache = False
    original = scheduler_module.Scheduler.__init__

    def recording_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        try:
            _record_scheduler(self)
        except Exception:  # a change in Inductor's internals must not fail the sample
            pass

    scheduler_module.Scheduler.__init__ = recording_init
    _installed[0] = True


def start_sample() -> None:
    """Record what Inductor does from now on (graph breaks counted from zero)."""
    from torch._dynamo.utils import counters

    install()
    counters["graph_break"].clear()
    counters["stats"].clear()
    _current[:] = [True, []]


def finish_sample() -> tuple[int, int, list[str]]:
    """(graphs dynamo captured, graph breaks, extern kernels) since ``start_sample``.

    Graphs are dynamo's count: a graph of views alone reaches no Inductor scheduler (nothing to
    compute), like kiln's graphs that need no kernel, and is still a graph."""
    from torch._dynamo.utils import counters

    externs = _current[1] if _current else []
    graphs = counters["stats"]["unique_graphs"]
    breaks = sum(counters["graph_break"].values())
    _current[:] = []
    return graphs, breaks, sorted(set(externs))
