"""Compiling generated Triton kernels for a GPU that is not there: Triton's compiler and ``ptxas`` run
on any machine, so a CPU-only machine can check that every kernel of a graph builds for an NVIDIA
architecture (the interpreter accepts code that the real compiler rejects: mixed dtypes in
``tl.where``, a reduction of a bool block, ...).

    from kiln.codegen.triton.offline import compile_for_gpu
    compile_for_gpu(compiled_graph)   # {kernel name: None, or the compiler's error}

Used by tests (``tests/codegen/triton/test_offline.py``) and by hand on graphs of big models.
"""
from __future__ import annotations

import torch

from kiln.codegen.triton.launch import COMPILE_OPTIONS, candidate_configs
from kiln.codegen.triton.matmul import CONSTEXPRS
from kiln.codegen.triton.matmul_launch import offline_configs

_SIG = {
    torch.float32: "fp32", torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "i1",
}


def kernel_signature(kernel, buffers) -> dict:
    """Triton's signature of a generated kernel: a typed pointer per buffer, then the constexprs."""
    sig = {}
    for i, (name, kind) in enumerate(kernel.params):
        sig[_pointer_name(kernel, i)] = "*" + _SIG[buffers[name].dtype]
    if kernel.style == "matmul":
        sig.update({name: "constexpr" for name in CONSTEXPRS})
        return sig
    sig["XBLOCK"] = "constexpr"
    if kernel.style == "tiled":
        sig["YBLOCK"] = "constexpr"
    elif kernel.style != "pointwise":
        sig["RBLOCK"] = "constexpr"
    return sig


def _pointer_name(kernel, i: int) -> str:
    n_in = sum(1 for _, kind in kernel.params if kind == "in")
    return f"in_ptr{i}" if i < n_in else f"out_ptr{i - n_in}"


def toolchain_missing(arch: int = 90) -> str | None:
    """None when Triton's NVIDIA backend and its ``ptxas`` for ``arch`` are here, else what is missing."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        return None if get_ptxas(arch).path else "no ptxas"
    except Exception as exc:  # ImportError, or a backend of another Triton version
        return f"{type(exc).__name__}: {exc}"


def compile_for_gpu(cg, arch: int = 90, options=None, all_configs: bool = False) -> dict:
    """Compile each Triton kernel of ``cg`` (a ``CompiledGraph`` of target "triton" or
    "triton-interpreted") for CUDA compute capability ``arch``: {kernel name: None or error text}."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kiln.codegen.triton.runtime import load_module
    from kiln.options import default_options

    options = options or default_options()
    ns, _, _ = load_module(cg.source, options, interpret=False)
    buffers = cg.lg.buffers()
    target = GPUTarget("cuda", arch, 32)
    results = {}
    for k in cg.kernels.values():
        sig = kernel_signature(k, buffers)
        error = None
        for consts, opts in _launches(k, ns[k.name], options, all_configs):
            try:
                triton.compile(ASTSource(ns[k.name], sig, constexprs=consts), target=target, options=opts)
            except Exception as exc:  # the compiler's error is the result
                error = f"{type(exc).__name__}: {exc}"
                break
        results[k.name] = error
    return results


def _launches(kernel, jit_fn, options, all_configs: bool):
    """(constexprs, compile options) of the configs to compile."""
    common = dict(COMPILE_OPTIONS, debug=bool(getattr(jit_fn, "debug", False)))
    if kernel.style == "matmul":
        configs = offline_configs(kernel, options.triton_max_block)
        k = kernel.shape[2]
        for cfg in configs if all_configs else configs[:1]:
            yield dict(zip(CONSTEXPRS, cfg.constexprs(k))), dict(common, num_warps=cfg.num_warps,
                                                                 num_stages=cfg.num_stages)
        return
    configs = candidate_configs(kernel, options.triton_max_block)
    for cfg in configs if all_configs else configs[:1]:
        consts = {name: value for name, value in cfg.kwargs().items() if name not in ("num_warps", *COMPILE_OPTIONS)}
        yield consts, dict(common, num_warps=cfg.num_warps)
