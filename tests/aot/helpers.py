import copy

import torch
import torch.fx as fx

from kiln.aot import verify
from kiln.backends.aot_eager import compile_aot_eager


def clone_inputs(inputs):
    return [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x for x in inputs]


def compare(fn, *inputs, module=None, atol=1e-5, rtol=1e-5):
    """Run ``fn`` eagerly and through aot_eager on copies of ``inputs`` (and of ``module``); compare
    outputs, inputs after the call (mutations) and the module's state. Returns the compiled callable."""
    eager_mod = module
    kiln_mod = copy.deepcopy(module) if module is not None else None
    gm = fx.symbolic_trace(kiln_mod if kiln_mod is not None else fn)
    eager_fn = eager_mod if eager_mod is not None else fn
    eager_in, kiln_in = clone_inputs(inputs), clone_inputs(inputs)
    compiled = compile_aot_eager(gm, clone_inputs(inputs), fallback=False)
    verify(compiled.aten_graph)
    expected = eager_fn(*eager_in)
    got = compiled(*kiln_in)
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    torch.testing.assert_close(kiln_in, eager_in, atol=atol, rtol=rtol)
    if module is not None:
        torch.testing.assert_close(dict(kiln_mod.state_dict()), dict(eager_mod.state_dict()), atol=atol, rtol=rtol)
    return compiled
