"""kiln's fused optimizer step: ``optimizer.step()`` as generated kernels, one per parameter.

Eager's step for Adam(W) runs a dozen ops per parameter (or a dozen multi-tensor ops over all of them),
each a pass over memory. Here the update of each parameter, its moments and its gradient read is one
generated kernel that reads each tensor once and stores the new values in place
(``schedule/inplace.py``): an FX graph built from the rule's update (``rules.py``) over all the
parameters of the optimizer, compiled by the kiln backend like any captured graph (C++ on the CPU,
Triton on the GPU) and cached by the tensors' shapes, strides, dtypes and devices and the rule's flags.

It runs only where it computes what eager computes: the optimizer's class is exactly one with a rule,
its ``step`` is not replaced, no step hooks are registered, no closure is passed, every group's
settings are covered, and every state tensor exists (a first step runs eagerly and makes them).
Otherwise eager's ``optimizer.step()`` runs, and ``FusedOptimizerStep.last_reason`` says why.
"""
from __future__ import annotations

import weakref

import torch
import torch.fx as fx

from kiln.debug.stats import stats
from kiln.optim.rules import RULES, advance_counters, unsupported_tensors
from kiln.options import Options, default_options

_STEPS: "weakref.WeakKeyDictionary[torch.optim.Optimizer, FusedOptimizerStep]" = weakref.WeakKeyDictionary()


def fused_step_for(opt: torch.optim.Optimizer, options: Options | None = None) -> "FusedOptimizerStep":
    """The optimizer's fused step (made once per optimizer; a call is ``optimizer.step()``)."""
    step = _STEPS.get(opt)
    if step is None or (options is not None and step.options != options):
        step = _STEPS[opt] = FusedOptimizerStep(opt, options or default_options())
    return step


def unsupported_reason(opt, options: Options | None = None) -> str | None:
    """Why ``opt.step()`` cannot run fused right now (None: it can)."""
    where = (options or default_options()).fused_optimizer
    if where == "off":
        return "Options.fused_optimizer is 'off'"
    if where == "cpu" and any(p.device.type != "cpu" for g in opt.param_groups for p in g["params"][:1]):
        # measured on an H100 (benchmarks/optimizer.py): one kernel per parameter loses to eager's
        # multi-tensor kernels there, and compiling it takes minutes for a 124M-parameter model
        return "parameters off the CPU, where kiln's fused step is not yet faster than eager's multi-tensor " \
               "step (Options.fused_optimizer='all' turns it on)"
    cls = type(opt)
    rule = RULES.get(cls)
    if rule is None:
        return f"{cls.__qualname__} has no fused-step rule in kiln (Adam, AdamW and SGD have)"
    if "step" in vars(opt) and not getattr(vars(opt)["step"], "_wrapped_by_lr_sched", False):
        return "the optimizer's step method is replaced on the instance"
    if _unhooked(cls.step) is not _ORIGINAL_STEPS.get(cls):
        return f"{cls.__qualname__}.step is not torch's own"
    from torch.optim import optimizer as optimizer_module

    if opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks or \
            optimizer_module._global_optimizer_pre_hooks or optimizer_module._global_optimizer_post_hooks:
        return "optimizer step hooks are registered (they run with eager's step)"
    if getattr(opt, "grad_scale", None) is not None or getattr(opt, "found_inf", None) is not None:
        return "a grad scaler's grad_scale/found_inf are set"
    for group in opt.param_groups:
        reason = rule.unsupported(group)
        if reason is not None:
            return reason
    return None


def _unhooked(step):
    """A class's step without the profiling-and-hooks wrappers torch.optim adds to it
    (``Optimizer._patch_step_function``, once per class, at its first instance)."""
    while getattr(step, "hooked", False) and hasattr(step, "__wrapped__"):
        step = step.__wrapped__
    return step


def _original_steps() -> dict:
    """Each ruled class's step as torch.optim defines it (AdamW's is Adam's)."""
    return {cls: _unhooked(cls.step) for cls in RULES}


_ORIGINAL_STEPS = _original_steps()


class FusedOptimizerStep:
    """Calling it is ``optimizer.step()`` (closure not supported: eager's step runs with one)."""

    def __init__(self, opt, options: Options):
        self.opt_ref = weakref.ref(opt)
        self.options = options
        self.compiled: dict[tuple, object] = {}  # key -> the compiled graph: (*flat tensors, scalars)
        self._last = None  # (group key, tensors' expected metadata, compiled graph) of the last step
        self.last_reason: str | None = None  # why the last call ran eager's step (None: it ran fused)

    def __call__(self, closure=None):
        opt = self.opt_ref()
        reason = "a closure was passed" if closure is not None else unsupported_reason(opt, self.options)
        if reason is None:
            reason = self._fused(opt)
        self.last_reason = reason
        if reason is not None:
            stats.optimizer_steps[f"eager: {reason}"] += 1
            return opt.step(closure) if closure is not None else opt.step()
        stats.optimizer_steps["fused"] += 1
        if getattr(opt.step, "_wrapped_by_lr_sched", False):
            opt._opt_called = True  # what the scheduler's wrapper of step records
        return None

    def _fused(self, opt) -> str | None:
        rule = RULES[type(opt)]
        works = []
        for group in opt.param_groups:
            work = rule.gather(opt, group)
            if work is None:
                return "a parameter's optimizer state is not made yet (its first step runs eagerly)"
            works.append(work)
        flat = tuple(t for work in works for row in work.tensors for t in row)
        if not flat:
            return None  # no parameter has a gradient: nothing to do, as in eager
        groups_key = (type(opt), tuple((w.flags, len(w.tensors), len(w.tensors[0]) if w.tensors else 0) for w in works))
        last = self._last
        if last is not None and last[0] == groups_key and _layouts_match(flat, last[1]):
            expected, (run, device, dtype) = last[1], last[2]  # laid out as at the last step: its graph
        else:
            reason = unsupported_tensors(works)
            if reason is not None:
                return reason
            devices = {t.device for t in flat}
            if len(devices) > 1:
                return "parameters on several devices"
            (device,) = devices
            dtype = torch.float64 if any(t.dtype == torch.float64 for t in flat) else torch.float32
            expected = tuple(map(_layout, flat))
            run = self.compiled.get((groups_key, expected))
        advance_counters(works)  # from here on the fused step runs: eager's bookkeeping first
        rows = [row for group, work in zip(opt.param_groups, works) for row in rule.scalars(group, work)]
        scalars = torch.tensor(rows, dtype=dtype).to(device, non_blocking=True)
        if run is None:
            run = self.compiled[(groups_key, expected)] = self._compile(rule, works, list(flat), scalars)
        self._last = (groups_key, expected, (run, device, dtype))
        with torch.no_grad():
            run(*flat, scalars)
        return None

    def _compile(self, rule, works, flat, scalars):
        gm = build_update_graph(rule, works)
        from kiln.backends.kiln import kiln_backend

        # not raced against the graph run op by op (that is not eager's step, which is what it replaces);
        # Triton block sizes by rule, not timed: the kernels are plain memory-bound loops, and timing the
        # configs of a whole model's parameter updates took minutes (GPT-2 on an H100)
        with torch.no_grad():
            run = kiln_backend(gm, [*flat, scalars], self.options.replace(choose_faster=False, triton_autotune=False))
        stats.optimizer_graphs += 1
        return run


def _layout(t: torch.Tensor) -> tuple:
    """What the compiled step assumes about a tensor it is passed (part of its cache key), in the order
    of kiln's C check ``held_tensors_match``."""
    return t.dtype, t.device, tuple(t.shape), t.stride(), t.requires_grad


def _layouts_match(flat: tuple, expected: tuple) -> bool:
    """Whether each tensor has the metadata in ``expected`` (in C where kiln's extension is built)."""
    if len(flat) != len(expected):
        return False
    from kiln.capture import hook

    match = getattr(hook._C, "held_tensors_match", None)
    if match is not None:
        try:
            return match(flat, expected)
        except Exception:  # (a sparse gradient has no strides)
            return False
    return all(map(_same_layout, flat, expected))


def _same_layout(t: torch.Tensor, want: tuple) -> bool:
    try:
        return _layout(t) == want
    except Exception:
        return False


def build_update_graph(rule, works) -> fx.GraphModule:
    """An FX graph of the whole step: placeholders for every parameter's tensors, then one for the
    scalars (a [parameters, scalars] tensor); the rule's update recorded per parameter."""
    graph = fx.Graph()
    tracer = fx.proxy.GraphAppendingTracer(graph)
    rows = []
    for g, work in enumerate(works):
        for i, row in enumerate(work.tensors):
            rows.append((work.flags, [fx.Proxy(graph.placeholder(f"g{g}_p{i}_{k}"), tracer) for k in range(len(row))]))
    table = fx.Proxy(graph.placeholder("scalars"), tracer)
    names = {name: j for j, name in enumerate(rule.scalar_names)}
    for r, (flags, proxies) in enumerate(rows):
        def scalar(name, r=r):
            return table[r, names[name]]

        rule.update(flags, proxies, scalar)
    graph.output(None)
    return fx.GraphModule(torch.nn.Module(), graph)
