"""Dynamic capture graphs built by hand for AOT tests: ``torch.fx.symbolic_trace`` of a function or
module, with ``gm.meta["kiln_shape_env"]`` and symbolic placeholder fakes, as capture hands them to a
backend (see docs/dynamic shapes)."""
from __future__ import annotations

import torch
import torch.fx as fx

from kiln.fake import fake_from_real
from kiln.fake.symbolic import ShapeEnv, symbolic_fake


def dynamic_gm(fn, inputs, dims) -> fx.GraphModule:
    """``fn`` (a function or module) traced by torch.fx, its graph made dynamic at ``dims``: one set of
    dims per input (or a dict input index -> dims). Sizes the code reads (``x.size(0)``, ``x.shape``)
    are ``size`` nodes in the graph, as capture records them."""
    gm = fx.symbolic_trace(fn)
    if not isinstance(dims, dict):
        dims = dict(enumerate(dims))
    env = ShapeEnv()
    bound = []  # inputs bound to the env, in order: what its check function takes
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(inputs)
    for i, (node, x) in enumerate(zip(placeholders, inputs)):
        fake = symbolic_fake(x, env, f"L['{node.name}']", set(dims.get(i, ()))) if isinstance(x, torch.Tensor) else None
        if fake is None and isinstance(x, torch.Tensor):
            fake = fake_from_real(x)
        elif fake is not None:
            bound.append(i)
        node.meta["example_value"] = fake
    gm.meta["kiln_shape_env"] = env
    gm.meta["test_bound_inputs"] = bound
    return gm


def check_guards(gm, inputs):
    """The env's run-time check on ``inputs`` (None: every guard holds)."""
    return gm.meta["kiln_shape_env"].check_function()(*[inputs[i] for i in gm.meta["test_bound_inputs"]])


def clone_inputs(inputs):
    return [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x for x in inputs]




def check_sizes(fn, make_inputs, dims, sizes=(8, 5, 13, 32), module=None, grads=False, atol=1e-5, rtol=1e-5):
    """Compile ``fn`` (or ``module``) once through aot_eager with symbolic sizes at ``dims`` (traced at
    ``make_inputs(sizes[0])``), then compare outputs (and, with ``grads``, the gradients of the inputs
    and parameters) against eager at every size. Returns the compiled callable."""
    import copy

    from kiln.backends.aot_eager import compile_aot_eager
    from kiln.debug.stats import stats

    target = module if module is not None else fn
    compiled_mod = copy.deepcopy(module) if module is not None else None
    example = make_inputs(sizes[0])
    gm = dynamic_gm(compiled_mod if compiled_mod is not None else fn, clone_inputs(example), dims)
    compiled = compile_aot_eager(gm, clone_inputs(example), fallback=False)
    for n in sizes:
        inputs = make_inputs(n)
        eager_in, kiln_in = clone_inputs(inputs), clone_inputs(inputs)
        failed = check_guards(gm, kiln_in)
        assert failed is None, f"size {n}: guard {failed} fails (a recompile); fallbacks: {stats.dynamic_fallbacks}"
        expected = target(*eager_in)
        got = compiled(*kiln_in)
        torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
        if grads:
            params = list(module.parameters()) if module is not None else []
            kparams = list(compiled_mod.parameters()) if module is not None else []
            e_leaves = [x for x in eager_in if isinstance(x, torch.Tensor) and x.requires_grad] + params
            k_leaves = [x for x in kiln_in if isinstance(x, torch.Tensor) and x.requires_grad] + kparams
            weights = [torch.randn_like(t) for t in torch.utils._pytree.tree_leaves(expected)
                       if isinstance(t, torch.Tensor) and t.is_floating_point()]
            e_outs = [t for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, torch.Tensor) and t.is_floating_point()]
            k_outs = [t for t in torch.utils._pytree.tree_leaves(got) if isinstance(t, torch.Tensor) and t.is_floating_point()]
            e_grads = torch.autograd.grad(e_outs, e_leaves, weights, allow_unused=True)
            k_grads = torch.autograd.grad(k_outs, k_leaves, weights, allow_unused=True)
            torch.testing.assert_close(k_grads, e_grads, atol=atol, rtol=rtol)
    return compiled
