"""Running functions through the Triton generator on CPU tensors (Triton's interpreter)."""
from __future__ import annotations

import pytest
import torch
import torch.fx as fx

pytest.importorskip("triton")

from kiln.backends.kiln import kiln_backend  # noqa: E402
from kiln.options import Options, default_options  # noqa: E402


def triton_options(**changes) -> Options:
    return default_options().replace(cpu_codegen="triton", **changes)


def compile_fn(fn, args, **option_changes):
    """The kiln backend's result for ``fn`` traced by torch.fx (no bytecode capture involved)."""
    gm = fx.symbolic_trace(fn)
    compiled = kiln_backend(gm, list(args), triton_options(**option_changes))
    cg = getattr(compiled, "compiled_graph", None)
    assert cg is not None, compiled.kiln_explain()
    assert cg.target == "triton-interpreted"
    return compiled, cg


def check(fn, *args, kernels=None, atol=1e-5, rtol=1e-5, **option_changes):
    """Compile ``fn`` with the Triton generator, compare with eager, return the compiled graph."""
    compiled, cg = compile_fn(fn, args, **option_changes)
    got = compiled(*args)
    want = fn(*args)
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, atol=atol, rtol=rtol, equal_nan=True)
    if kernels is not None:
        assert len(cg.kernels) == kernels, cg.source
    return cg


def cuda(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda").to(dtype)


def compile_and_check_cuda(fn, *args, atol, rtol, **option_changes):
    """(kiln backend's result, compiled graph) for ``fn`` on CUDA tensors, checked against eager: Triton
    code (not an ATen fallback), same devices, dtypes and shapes, values within atol/rtol."""
    gm = fx.symbolic_trace(fn)
    compiled = kiln_backend(gm, list(args), default_options().replace(**option_changes))
    cg = getattr(compiled, "compiled_graph", None)
    assert cg is not None and cg.target == "triton", compiled.kiln_explain()
    got, want = compiled(*args), fn(*args)
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        assert g.device.type == "cuda" and g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, atol=atol, rtol=rtol, equal_nan=True)
    return compiled, cg
