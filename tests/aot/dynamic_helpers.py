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
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(inputs)
    for i, (node, x) in enumerate(zip(placeholders, inputs)):
        fake = symbolic_fake(x, env, f"L['{node.name}']", set(dims.get(i, ()))) if isinstance(x, torch.Tensor) else None
        if fake is None and isinstance(x, torch.Tensor):
            fake = fake_from_real(x)
        node.meta["example_value"] = fake
    gm.meta["kiln_shape_env"] = env
    return gm
