"""Generating, loading and launching the Triton kernels of one scheduled graph."""
from __future__ import annotations

import functools
import hashlib
import re

from kiln.codegen.triton.kernel import fusable, generate_kernel
from kiln.codegen.triton.launch import Launcher, candidate_configs
from kiln.codegen.triton.matmul import MatmulKernel, generate_matmul
from kiln.codegen.triton.matmul_launch import MatmulChoice, offline_configs
from kiln.codegen.triton.precompile import precompile
from kiln.codegen.triton.runtime import MODULE_HEADER, load_module, module_path


def can_fuse(options):
    """The scheduler hook: groups the Triton generator can turn into one kernel."""
    return functools.partial(_can_fuse, persistent_max=options.triton_persistent_max)


def _can_fuse(members, k, persistent_max):
    return fusable(members, k, persistent_max)


def generate_kernels(groups, buffers, options) -> dict:
    kernels = {}
    for i, group in enumerate(groups):
        k = generate_kernel(group, buffers, i, options.triton_persistent_max)
        group.name = k.name
        kernels[k.name] = k
    return kernels


def generate_templates(templates, buffers, options, first_index: int, interpret: bool) -> dict:
    """The kernels of matmul templates (``schedule/templates.py``): each template's own, and before it
    its epilogue group's kernel, which the library path runs after the library call."""
    import torch

    precision = "tf32" if not interpret and torch.backends.cuda.matmul.allow_tf32 else "ieee"
    kernels, index = {}, first_index
    for t in templates:
        if t.epilogue is not None:
            ek = generate_kernel(t.epilogue, buffers, index, options.triton_persistent_max)
            t.epilogue.name, kernels[ek.name], index = ek.name, ek, index + 1
        k = generate_matmul(t, buffers, index, precision)
        k.epilogue_kernel = t.epilogue.name if t.epilogue is not None else None
        t.name, kernels[k.name], index = k.name, k, index + 1
    return kernels


def describe_kernels(kernels: dict) -> list[str]:
    """``explain``'s lines for the kernels: what each fuses; templates with their epilogue and choice."""
    library_path = {k.epilogue_kernel: k.name for k in kernels.values()
                    if isinstance(k, MatmulKernel) and k.epilogue_kernel}
    lines = []
    for k in kernels.values():
        if isinstance(k, MatmulKernel):
            t = k.template
            m, n, kk = t.shape
            epi = t.epilogue
            what = f"epilogue {', '.join(op for op in _op_list(epi))}" if epi is not None else "no epilogue"
            lines.append(f"  {k.name}: matmul template, {t.kind} {m}x{n}x{kk} {str(k.dtype).replace('torch.', '')}, "
                         f"{what}" + ("" if t.store_out else f"; {t.out} never allocated"))
            choice = k.fn.explain() if k.fn is not None else "not loaded"
            lines.append(f"    choice: {choice}")
        elif k.name in library_path:
            lines.append(f"  {k.name}: fuses {len(k.origins)} op(s) (epilogue of {library_path[k.name]} "
                         f"on its library path)")
        else:
            lines.append(f"  {k.name}: fuses {len(k.origins)} op(s)")
    return lines


def _op_list(group) -> list[str]:
    """The scalar ops of a group's bodies, in order (its buffers' origins name only the op that realized them)."""
    import re

    from kiln.loopir.handlers import Printer, run_body

    ops = []
    for m in group.members:
        p = Printer(_AnyDtype())
        run_body(m.node, p)
        for line in p.lines:
            for op in re.findall(r"= (\w+)\(", line):
                if op not in _PLUMBING and op not in ops:
                    ops.append(op)
    return ops or [m.name for m in group.members]


_PLUMBING = {"load", "store", "constant", "index_expr", "to_dtype"}


class _AnyDtype(dict):
    def __missing__(self, key):
        import torch

        return torch.float32


def module_source(kernels: dict) -> str:
    return MODULE_HEADER + "\n\n" + "\n\n".join(k.source for k in kernels.values())


def load_kernels(kernels: dict, buffers: dict, options, interpret: bool) -> str:
    """Load the kernels and give each kernel its launcher (``kernel.fn``); returns the graph's kernel
    source (``module_source``: what explain and the warm cache show and compare).

    Each distinct kernel body is a source file of its own, named by its content (``canonical_kernel``):
    kernels with the same code -- a model's repeated layers, a forward's kernel again in its backward,
    a backward compiled again with some gradients absent, another model or process -- share one Triton
    function, so they compile once (Triton keys its binaries by the function's source, name and line)
    and tune once. On the GPU, a kernel file no process has finished building (``runtime.mark_built``)
    is compiled ahead of its launches by the worker pool (``precompile.py``). Launch-config choices are
    saved per graph, beside ``module_path(source)`` (``<path>.tune.json``)."""
    source = module_source(kernels)
    if not kernels:
        return source
    tune_path = module_path(source, options) + ".tune.json"
    tune = options.triton_autotune and not interpret
    leaders: dict = {}  # body key -> the first launcher of that code
    namespaces: dict = {}  # body key -> the executed kernel file
    fresh = []  # (launcher, kernel file, function name) of kernel files that still need building
    for k in kernels.values():
        key = _body_key(k)
        leader = leaders.get(key)
        if leader is not None:
            fn = leader.fn
        else:
            name, kernel_source = canonical_kernel(k, key)
            namespaces[key], path, unbuilt = load_module(kernel_source, options, interpret)
            fn = namespaces[key][name]
        dtypes = tuple(str(buffers[param].dtype) for param, _ in k.params)
        if isinstance(k, MatmulKernel):
            configs = offline_configs(k, options.triton_max_block)
            epilogue = kernels.get(k.epilogue_kernel)
            share = _share_key(key, dtypes, configs, _body_key(epilogue) if epilogue is not None else "")
            k.fn = MatmulChoice(fn, k, epilogue, configs, None if interpret else tune_path,
                                options.matmul_choice, interpret, options.triton_fast_launch, leader=leader,
                                share_key=None if interpret else share)
        else:
            configs = candidate_configs(k, options.triton_max_block)  # (size-generic: per size bucket at run time)
            k.fn = Launcher(fn, k, configs, tune_path if tune else None,
                            fast_launch=options.triton_fast_launch, leader=leader, max_block=options.triton_max_block,
                            share_key=_share_key(key, dtypes, configs, options.triton_max_block) if tune else None)
        if leader is None:
            leaders[key] = k.fn
            if unbuilt:
                fresh.append((k.fn, path, name))
        if interpret and "kh.check_index(" in k.source:  # (on the GPU a failed check is a device-side assert)
            k.checks_bounds, k.take_error = True, namespaces[key]["kh"].take_index_error
    if fresh and not interpret and options.compile_workers > 0:
        static = [f for f in fresh if not getattr(f[0].kernel, "size_args", None)]
        precompile(list(_launches(static, buffers)), options.compile_workers, built=[path for _, path, _ in fresh])
    return source


def canonical_kernel(k, body_key: str) -> tuple[str, str]:
    """(function name, file source) of a kernel as it is loaded: its code without comments under a
    name made from its own name's ops and a hash of its code, so equal code gives an equal file (and
    the profiler shows a name that says what the kernel fuses)."""
    stem = re.sub(r"_\d+$", "", k.name)
    name = f"{stem}_{hashlib.sha256(body_key.encode()).hexdigest()[:10]}"
    return name, MODULE_HEADER + "\n\n" + _without_comments(k.source).replace(k.name, name) + "\n"


def _launches(distinct, buffers: dict):
    """(jit function, kernel file, function name, argument dtypes, meta) of each launch config the
    distinct kernels may use: the chosen one, or every candidate that the first call will time."""
    for launcher, path, name in distinct:
        k = launcher.kernel
        dtypes = [buffers[param].dtype for param, _ in k.params]
        if isinstance(launcher, MatmulChoice):
            if launcher.picked == "library":
                continue
            configs = [launcher.run.config] if launcher.run is not None else launcher.configs
            metas = [cfg.kwargs(k.shape[2]) for cfg in configs]
        else:
            metas = [cfg.kwargs() for cfg in ([launcher.config] if launcher.config is not None else launcher.configs)]
        for meta in metas:
            yield launcher.fn, path, name, dtypes, meta


def _share_key(body_key: str, *more) -> str:
    """The key of a kernel's tuning choice in ``launch.SHARED_CHOICES``: its code and what it is timed among."""
    return hashlib.sha256(repr((body_key,) + tuple(more)).encode()).hexdigest()


def _body_key(k) -> str:
    """A kernel's code without its name and comments: equal for the same computation under another name."""
    return _without_comments(k.source).replace(k.name, "KERNEL")


def _without_comments(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))
