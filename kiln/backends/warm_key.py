"""The key of a whole-graph warm-cache entry: a content hash of everything the code generated for a
captured graph depends on (see docs/caching.md).

    graph_key(gm, example_inputs, options, target) -> (key, None) or (None, why it cannot be cached)

What goes in: the captured FX graph's code; per graph input and per parameter, buffer or tensor
attribute the graph reads: type, dtype, device, layout, sizes, strides, storage offset, requires_grad
and which other tensors share its memory (ATen tracing depends on aliasing); non-tensor inputs by
value; the options that change code; the global modes the trace runs under (grad, inference mode,
autocast, default dtype, TF32); the versions of kiln (a hash of its sources), torch, triton, Python;
the target and the device (the C++ compiler, its flags and the CPU's features; the GPU's name and
compute capability). Anything whose effect the key cannot see (a size symbol, a call_module node, a
call of a function outside torch) makes the graph uncacheable: it is compiled as always.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import math
import operator
import os
import platform
import sys

import torch
import torch.fx as fx

KEY_FORMAT = "kiln-warm-1"

# Options that do not change generated code (where files go, logging, process counts).
_OPTIONS_NOT_IN_KEY = {"cache_dir", "debug_dir", "logs", "compile_workers", "recompile_limit", "warm_cache"}

_SAFE_LEAVES = (int, float, complex, bool, str, type(None), torch.dtype, torch.device, torch.layout,
                torch.memory_format, torch.Size, slice, type(Ellipsis), fx.Node)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter) + ((torch.nn.Buffer,) if hasattr(torch.nn, "Buffer") else ())
_TARGET_MODULES = ("torch", "operator", "_operator", "math", "builtins")


@functools.lru_cache(maxsize=None)
def kiln_source_hash() -> str:
    """A hash of kiln's own source files: any change to the compiler makes new keys."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".h", ".c")):
                path = os.path.join(directory, name)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def _version(package: str) -> str:
    module = sys.modules.get(package)
    if getattr(module, "__version__", None):
        return module.__version__
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


@functools.lru_cache(maxsize=None)
def _cpu_identity() -> str:
    """The CPU's model and feature flags (C++ kernels are built with -march=native)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f.read().splitlines() if line.startswith(("model name", "flags"))]
        text = "\n".join(sorted(set(lines)))
    except OSError:
        text = platform.processor()
    return platform.machine() + ":" + hashlib.sha256(text.encode()).hexdigest()[:16]


def environment(target: str, options, device: torch.device | None = None) -> dict:
    """Versions and the machine the code is built for: part of every key, and checked by artifacts."""
    return dict(_environment(target, options.cpp_compiler if target == "cpp" else "",
                             str(device) if target == "triton" and device is not None else ""))


@functools.lru_cache(maxsize=None)
def _environment(target: str, cpp_compiler: str, device: str) -> tuple:
    env = {"format": KEY_FORMAT, "kiln": kiln_source_hash(), "torch": torch.__version__,
           "python": sys.version.split()[0], "target": target}
    if target == "cpp":
        from kiln.codegen.cpp.build import build_flags, compiler_version

        env["cpu"] = _cpu_identity()
        env["cxx"] = compiler_version(cpp_compiler)
        env["cxx_flags"] = " ".join(build_flags(cpp_compiler))
    else:
        env["triton"] = _version("triton")
    if target == "triton" and device and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(device)
        env["gpu_capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
    return tuple(env.items())


def _global_modes() -> tuple:
    cuda_autocast = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    cpu_autocast = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), cuda_autocast, cpu_autocast,
            torch.get_default_dtype(), torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled())


def _tensor_meta(t: torch.Tensor, alias: int) -> tuple:
    return (type(t).__qualname__, str(t.dtype), str(t.device), str(t.layout), tuple(t.shape), tuple(t.stride()),
            t.storage_offset(), t.requires_grad, t.is_leaf, t.is_inference(), alias)


class Uncacheable(Exception):
    """Why a graph gets no warm-cache entry."""


def _input_metas(example_inputs, state: dict) -> list:
    storages: dict = {}  # storage -> the index of the first tensor on it
    metas = []
    tensors = [("input", i, x) for i, x in enumerate(example_inputs)]
    tensors += [(kind, name, t) for name, (t, kind) in state.items()]
    for kind, name, x in tensors:
        if isinstance(x, torch.Tensor):
            if x.is_meta or type(x) not in _PLAIN_TENSORS or x.layout != torch.strided:
                raise Uncacheable(f"a {type(x).__name__} input ({x.layout}{', meta' if x.is_meta else ''})")
            if any(not isinstance(s, int) for s in (*x.shape, *x.stride())):
                raise Uncacheable("symbolic sizes")
            storage = (x.untyped_storage().data_ptr(), x.device) if x.untyped_storage().nbytes() else id(x)
            alias = storages.setdefault(storage, len(storages))
            metas.append((kind, name, _tensor_meta(x, alias)))
        elif type(x) in (int, float, bool, str, type(None)):
            if type(x) is float and not math.isfinite(x):
                x = repr(x)
            metas.append((kind, name, type(x).__name__, x))
        else:
            raise Uncacheable(f"a graph input of type {type(x).__name__}")
    return metas


def _check_graph(gm: fx.GraphModule) -> None:
    """Raise Uncacheable where ``gm.code`` does not say everything about what the graph computes."""
    for node in gm.graph.nodes:
        if node.op == "call_module":
            raise Uncacheable(f"a call_module node ({node.target})")
        if node.op == "call_function":
            target = node.target
            module = getattr(target, "__module__", None) or ""
            if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
                # a packet (torch.ops.aten.foo, no overload chosen) has no .namespace
                namespace = getattr(target, "namespace", None) or target._qualified_op_name.split("::")[0]
                if namespace not in ("aten", "prims"):
                    raise Uncacheable(f"a custom op ({target})")
            elif module.split(".")[0] not in _TARGET_MODULES and target not in vars(operator).values():
                raise Uncacheable(f"a call of {getattr(target, '__qualname__', target)} from {module or '?'}")
        for leaf in torch.utils._pytree.tree_leaves((node.args, node.kwargs)):
            if not isinstance(leaf, _SAFE_LEAVES):
                raise Uncacheable(f"a {type(leaf).__name__} argument of {node.name}")


def graph_device(example_inputs) -> str | None:
    """The device of the first tensor input (the device part of the environment)."""
    devices = [x.device for x in example_inputs if isinstance(x, torch.Tensor)]
    return str(devices[0]) if devices else None


def options_key(options) -> tuple:
    return tuple((f.name, getattr(options, f.name)) for f in dataclasses.fields(options)
                 if f.name not in _OPTIONS_NOT_IN_KEY)


def graph_key(gm: fx.GraphModule, example_inputs, options, target: str) -> tuple[str | None, str | None]:
    """(key, None), or (None, why the graph cannot be cached)."""
    from kiln.aot.trace import state_tensors

    try:
        _check_graph(gm)
        metas = _input_metas(example_inputs, state_tensors(gm))
    except Uncacheable as exc:
        return None, str(exc)
    env = environment(target, options, graph_device(example_inputs))
    material = repr((env, gm.code, metas, options_key(options), _global_modes()))
    return hashlib.sha256(material.encode()).hexdigest(), None
