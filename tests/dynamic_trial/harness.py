"""Helpers of the black-box dynamic-shape trial: run a function compiled by kiln on a sequence of inputs,
compare every call with eager, and read recompiles and fallbacks from kiln's public counters
(``kiln.stats.snapshot()``)."""
from __future__ import annotations

import copy

import torch
from torch.testing import assert_close

import kiln


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rand(*shape, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed + 1000 * len(shape) + sum(shape)), dtype=dtype)


def clone_tree(obj):
    """Deep copy of the arguments (tensors cloned with their strides and requires_grad)."""
    if isinstance(obj, torch.Tensor):
        if obj.requires_grad and obj.is_leaf:
            return obj.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)
        if 0 in obj.stride():  # expanded: a plain copy (a strided copy into overlapping memory is refused)
            return obj.detach().clone()
        out = torch.empty_strided(obj.size(), obj.stride(), dtype=obj.dtype)
        out.copy_(obj.detach())
        return out
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return type(obj)(clone_tree(o) for o in obj)
    if isinstance(obj, dict):
        return {k: clone_tree(v) for k, v in obj.items()}
    return obj


def same(got, expected, where: str) -> None:
    """Equal values, types, shapes and dtypes (tensors), equal Python values otherwise."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: got {type(got).__name__}, eager gave a tensor"
        assert got.shape == expected.shape, f"{where}: shape {tuple(got.shape)} != eager {tuple(expected.shape)}"
        assert_close(got, expected, equal_nan=True, msg=lambda m: f"{where}: {m}")
    elif isinstance(expected, (list, tuple)):
        assert type(got) is type(expected), f"{where}: got {type(got).__name__}, eager {type(expected).__name__}"
        assert len(got) == len(expected), f"{where}: {len(got)} results, eager {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            same(g, e, f"{where}[{i}]")
    elif isinstance(expected, dict):
        assert got.keys() == expected.keys(), where
        for k in expected:
            same(got[k], expected[k], f"{where}[{k!r}]")
    else:
        assert type(got) is type(expected) and got == expected, f"{where}: {got!r} != eager {expected!r}"


def fresh() -> None:
    kiln.reset()
    kiln.stats.reset()


def compile_fn(fn, *, backend="kiln", dynamic=None, options=None, fullgraph=False):
    kwargs = dict(backend=backend, dynamic=dynamic, fullgraph=fullgraph)
    if options is not None:
        kwargs["options"] = options
    return kiln.compile(fn, **kwargs)


def check_counts(snap: dict, *, max_graphs: int | None, min_dynamic: int = 0) -> None:
    limit = [r for r in snap["eager_fallbacks"] if "limit" in str(r).lower()]
    assert not limit, f"fell back to eager for the recompile limit: {snap['eager_fallbacks']}"
    if max_graphs is not None:
        assert snap["graphs"] <= max_graphs, (
            f"{snap['graphs']} graphs compiled (at most {max_graphs} expected); "
            f"recompilations: {[r[:160] for r in snap['recompilations']][:4]}; "
            f"dynamic_fallbacks: {snap['dynamic_fallbacks']}")
    assert snap["dynamic_graphs"] >= min_dynamic, (
        f"{snap['dynamic_graphs']} size-generic graphs (expected >= {min_dynamic}); "
        f"dynamic_fallbacks: {snap['dynamic_fallbacks']}")


def run(fn, calls, *, max_graphs: int | None = 2, min_dynamic: int = 0, eager_fn=None, backend="kiln",
        dynamic=None, options=None) -> dict:
    """Compile ``fn``, call it on each argument tuple of ``calls``, compare with ``eager_fn`` (default
    ``fn``) on copies of the same arguments (results and mutated arguments), and check the counters."""
    fresh()
    compiled = compile_fn(fn, backend=backend, dynamic=dynamic, options=options)
    eager_fn = fn if eager_fn is None else eager_fn
    for i, args in enumerate(calls):
        if not isinstance(args, tuple):
            args = (args,)
        # kiln gets the caller's own tensors (kiln.mark_dynamic/mark_static marks live on them); eager a copy
        e_args, c_args = clone_tree(args), args
        expected = eager_fn(*e_args)
        got = compiled(*c_args)
        shapes = [tuple(a.shape) for a in e_args if isinstance(a, torch.Tensor)]
        same(got, expected, f"call {i} (shapes {shapes})")
        same(list(c_args), list(e_args), f"call {i} arguments after the call")
    snap = kiln.stats.snapshot()
    check_counts(snap, max_graphs=max_graphs, min_dynamic=min_dynamic)
    return snap


def run_module(make, calls, **kw) -> dict:
    """``make()`` builds a module (seeded); eager runs one copy, kiln compiles another."""
    torch.manual_seed(0)
    m = make()
    return run(m, calls, eager_fn=copy.deepcopy(m), **kw)


def train(make, calls, *, loss_fn=None, steps_opt: bool = False, max_graphs: int | None = 2,
          backend="kiln", dynamic=None, lr: float = 0.1) -> dict:
    """Training steps on each (inputs, target) of ``calls``: forward by kiln and by eager, loss,
    backward; loss, gradients and (with ``steps_opt``) parameters after an SGD step must match."""
    fresh()
    torch.manual_seed(0)
    m_e = make()
    m_c = copy.deepcopy(m_e)
    compiled = compile_fn(m_c, backend=backend, dynamic=dynamic)
    opt_e = torch.optim.SGD(m_e.parameters(), lr=lr)
    opt_c = torch.optim.SGD(m_c.parameters(), lr=lr)
    loss_fn = loss_fn or (lambda out, tgt: torch.nn.functional.mse_loss(out, tgt))
    for i, (x, tgt) in enumerate(calls):
        x_e, x_c = clone_tree(x), clone_tree(x)
        x_e = x_e if isinstance(x_e, tuple) else (x_e,)
        x_c = x_c if isinstance(x_c, tuple) else (x_c,)
        loss_e = loss_fn(m_e(*x_e), tgt)
        loss_c = loss_fn(compiled(*x_c), tgt)
        same(loss_c, loss_e, f"step {i} loss")
        loss_e.backward()
        loss_c.backward()
        for (name, p_e), p_c in zip(m_e.named_parameters(), m_c.parameters()):
            same(p_c.grad, p_e.grad, f"step {i} grad of {name}")
        for a_e, a_c in zip(x_e, x_c):
            if isinstance(a_e, torch.Tensor) and a_e.requires_grad:
                same(a_c.grad, a_e.grad, f"step {i} input grad")
        if steps_opt:
            opt_e.step()
            opt_c.step()
        opt_e.zero_grad()
        opt_c.zero_grad()
    snap = kiln.stats.snapshot()
    check_counts(snap, max_graphs=max_graphs)
    return snap


def raises_like_eager(fn, good_calls, bad_call, *, backend="kiln", dynamic=None) -> None:
    """After compiling on ``good_calls``, ``bad_call`` must raise in kiln when it raises in eager."""
    fresh()
    compiled = compile_fn(fn, backend=backend, dynamic=dynamic)
    for args in good_calls:
        args = args if isinstance(args, tuple) else (args,)
        same(compiled(*clone_tree(args)), fn(*clone_tree(args)), "good call")
    bad_call = bad_call if isinstance(bad_call, tuple) else (bad_call,)
    try:
        fn(*clone_tree(bad_call))
    except Exception as e:  # noqa: BLE001 - any error eager raises
        eager_error = type(e)
    else:
        raise AssertionError("test bug: eager does not raise on the bad call")
    try:
        got = compiled(*clone_tree(bad_call))
    except Exception as e:  # noqa: BLE001
        assert isinstance(e, (eager_error, RuntimeError, ValueError)), f"kiln raised {type(e).__name__}: {e}"
    else:
        raise AssertionError(f"kiln returned a result where eager raises {eager_error.__name__}: "
                             f"{getattr(got, 'shape', got)}")
