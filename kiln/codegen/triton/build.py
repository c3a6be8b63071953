"""Generating, loading and launching the Triton kernels of one scheduled graph."""
from __future__ import annotations

import functools

from kiln.codegen.triton.kernel import fusable, generate_kernel
from kiln.codegen.triton.launch import Launcher, candidate_configs
from kiln.codegen.triton.runtime import MODULE_HEADER, load_module


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


def module_source(kernels: dict) -> str:
    return MODULE_HEADER + "\n\n" + "\n\n".join(k.source for k in kernels.values())


def load_kernels(kernels: dict, options, interpret: bool) -> str:
    """Load the kernels' module and give each kernel its launcher (``kernel.fn``); returns the source."""
    source = module_source(kernels)
    if not kernels:
        return source
    ns, path = load_module(source, options, interpret)
    tune = options.triton_autotune and not interpret
    for k in kernels.values():
        configs = candidate_configs(k, options.triton_max_block)
        k.fn = Launcher(ns[k.name], k, configs, path + ".tune.json" if tune else None,
                        fast_launch=options.triton_fast_launch)
    return source
