"""Per-optimizer rules for kiln's fused optimizer step: one rule per torch.optim class.

A rule says which settings it covers, which tensors a parameter's update reads and writes (the
parameter, its gradient, its state tensors), the host-side bookkeeping eager does on every step (the
step counters, the bias corrections computed as Python floats), and the update itself, written with
the same ops in the same order as torch's single-tensor implementation (``torch/optim/adam.py``,
``sgd.py``). Scalars that change between steps (the learning rate, bias corrections) reach the
update as entries of a small tensor, so a learning-rate schedule never recompiles.

``gather`` returns None when a parameter's state is not made yet (its first step): eager's own step
runs then, and creates the state exactly as torch does.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

RULES: dict[type, "OptimizerRule"] = {}
_ONE = torch.tensor(1.0)


def optimizer_rule(*classes):
    def register(rule_class):
        rule = rule_class()
        for cls in classes:
            RULES[cls] = rule
        return rule_class
    return register


@dataclasses.dataclass
class GroupWork:
    """One param group's update: per parameter (with a gradient) its tensors, in the rule's order; the
    settings that change the update's code; the step counters eager advances on every step."""

    tensors: list[list[torch.Tensor]]
    flags: tuple  # part of the compiled step's key
    counters: list[torch.Tensor] = dataclasses.field(default_factory=list)


class OptimizerRule:
    scalar_names: tuple[str, ...] = ()

    def unsupported(self, group: dict) -> str | None:
        """Why this group's settings need eager's step, or None."""
        raise NotImplementedError

    def gather(self, opt, group: dict) -> GroupWork | None:
        """The group's work, changing nothing (None: eager's step must run)."""
        raise NotImplementedError

    def scalars(self, group: dict, work: GroupWork) -> list[list[float]]:
        """Per parameter, its ``scalar_names`` as Python floats computed as eager computes them, once
        the counters have advanced."""
        raise NotImplementedError

    def update(self, flags: tuple, tensors: list, scalar: Callable[[str], object]) -> None:
        """Record one parameter's update on ``tensors`` (FX proxies) with in-place ops;
        ``scalar(name)`` is that parameter's scalar of that name (a 0-dim tensor)."""
        raise NotImplementedError


def advance_counters(works: list[GroupWork]) -> None:
    """Eager's ``step_t += 1`` of every counter (its multi-tensor path adds a CPU tensor 1.0, the cheaper
    call for CPU counters)."""
    counters = [c for work in works for c in work.counters]
    if counters:
        torch._foreach_add_(counters, _ONE)


def _common_unsupported(group: dict) -> str | None:
    if group.get("fused"):
        return "fused=True (torch's own fused kernels)"
    if group.get("differentiable"):
        return "differentiable=True"
    if group.get("capturable"):
        return "capturable=True"
    for key in ("lr", "betas", "weight_decay", "momentum", "eps"):
        value = group.get(key)
        values = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, torch.Tensor) for v in values):
            return f"a tensor {key}"
    return None


def unsupported_tensors(works: list[GroupWork]) -> str | None:
    """Why the gathered tensors need eager's step (sparse gradients, complex parameters), or None. Checked
    when a step's tensors differ in layout from the last compiled step's (a sparse or complex tensor
    cannot have a strided real layout's metadata)."""
    for work in works:
        for row in work.tensors:
            p, grad = row[0], row[1]
            if grad.layout != torch.strided or p.is_complex():
                return "sparse gradients or complex parameters"
    return None


@optimizer_rule(torch.optim.Adam, torch.optim.AdamW)
class AdamRule(OptimizerRule):
    scalar_names = ("lerp_weight", "beta2", "one_minus_beta2", "step_size_neg", "bias_correction2_sqrt", "eps",
                    "decay_factor", "weight_decay")

    def unsupported(self, group):
        return _common_unsupported(group)

    def gather(self, opt, group):
        amsgrad = bool(group["amsgrad"])
        decoupled = bool(group.get("decoupled_weight_decay", isinstance(opt, torch.optim.AdamW)))
        params = [p for p in group["params"] if p.grad is not None]
        states = [opt.state.get(p) for p in params]
        if any(not s for s in states):
            return None  # a first step: eager's step makes the state
        steps = [s["step"] for s in states]
        if any(s.device.type != "cpu" or s.dim() != 0 for s in steps):
            return None
        tensors = []
        for p, s in zip(params, states):
            row = [p, p.grad, s["exp_avg"], s["exp_avg_sq"]]
            if amsgrad:
                row.append(s["max_exp_avg_sq"])
            tensors.append(row)
        flags = (amsgrad, decoupled, group["weight_decay"] != 0, bool(group["maximize"]))
        return GroupWork(tensors, flags, steps)

    def scalars(self, group, work):
        # eager: ``step = step_t.item()`` (a float32 counter), the rest in Python floats
        steps = work.counters
        values = torch.stack(steps).tolist() if len(steps) > 1 else [s.item() for s in steps]
        beta1, beta2 = group["betas"]
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        rows: dict = {}  # by step value (the counters of a group usually agree)
        for step in values:
            if step not in rows:
                bias_correction1 = 1 - beta1 ** step
                bias_correction2 = 1 - beta2 ** step
                step_size = lr / bias_correction1
                rows[step] = [1 - beta1, beta2, 1 - beta2, -step_size, bias_correction2 ** 0.5, eps, 1 - lr * wd, wd]
        return [rows[step] for step in values]

    def update(self, flags, tensors, scalar):
        amsgrad, decoupled, has_weight_decay, maximize = flags
        param, grad, exp_avg, exp_avg_sq = tensors[:4]
        if maximize:
            grad = -grad
        if has_weight_decay:
            if decoupled:
                param.mul_(scalar("decay_factor"))
            else:
                grad = grad + scalar("weight_decay") * param  # grad.add(param, alpha=weight_decay)
        exp_avg.lerp_(grad, scalar("lerp_weight"))
        exp_avg_sq.mul_(scalar("beta2")).add_(scalar("one_minus_beta2") * grad * grad)  # addcmul_(value=)
        if amsgrad:
            max_exp_avg_sq = tensors[4]
            max_exp_avg_sq.copy_(torch.maximum(max_exp_avg_sq, exp_avg_sq))
            denom = (max_exp_avg_sq.sqrt() / scalar("bias_correction2_sqrt")).add_(scalar("eps"))
        else:
            denom = (exp_avg_sq.sqrt() / scalar("bias_correction2_sqrt")).add_(scalar("eps"))
        param.add_(scalar("step_size_neg") * (exp_avg / denom))  # addcdiv_(value=-step_size)


@optimizer_rule(torch.optim.SGD)
class SGDRule(OptimizerRule):
    scalar_names = ("weight_decay", "momentum", "one_minus_dampening", "lr_neg")

    def unsupported(self, group):
        return _common_unsupported(group)

    def gather(self, opt, group):
        momentum = group["momentum"]
        params = [p for p in group["params"] if p.grad is not None]
        tensors = []
        for p in params:
            row = [p, p.grad]
            if momentum != 0:
                buf = opt.state.get(p, {}).get("momentum_buffer")
                if buf is None:
                    return None  # the first step clones the gradient into the buffer: eager's step
                row.append(buf)
            tensors.append(row)
        flags = (group["weight_decay"] != 0, momentum != 0, bool(group["nesterov"]), bool(group["maximize"]))
        return GroupWork(tensors, flags)

    def scalars(self, group, work):
        row = [group["weight_decay"], group["momentum"], 1 - group["dampening"], -group["lr"]]
        return [row] * len(work.tensors)

    def update(self, flags, tensors, scalar):
        has_weight_decay, has_momentum, nesterov, maximize = flags
        param, grad = tensors[:2]
        if maximize:
            grad = -grad
        if has_weight_decay:
            grad = grad + scalar("weight_decay") * param  # grad.add(param, alpha=weight_decay)
        if has_momentum:
            buf = tensors[2]
            buf.mul_(scalar("momentum")).add_(scalar("one_minus_dampening") * grad)
            grad = grad + scalar("momentum") * buf if nesterov else buf
        param.add_(scalar("lr_neg") * grad)  # add_(grad, alpha=-lr)
