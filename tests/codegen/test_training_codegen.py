"""Training through backend "kiln": forward and backward graphs both get generated C++ kernels."""
import copy

import torch

import kiln
from kiln.aot.training import TrainingRuntime
from kiln.backends.kiln import kiln_backend


def test_forward_and_backward_graphs_are_generated_and_match_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    twin = copy.deepcopy(model)
    runtimes = []

    def backend(gm, example_inputs):
        rt = kiln_backend(gm, example_inputs)
        runtimes.append(rt)
        return rt

    compiled = kiln.compile(twin, backend=backend)
    x = torch.randn(8, 16)
    opt_a = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(twin.parameters(), lr=0.1)
    for _ in range(2):
        for mod, opt in ((model, opt_a), (compiled, opt_b)):
            opt.zero_grad()
            mod(x).softmax(-1).pow(2).sum().backward()
            opt.step()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q)
    (rt,) = runtimes
    assert isinstance(rt, TrainingRuntime)
    assert rt.codegen_complete and len(rt.compiled_graphs) == 2
    assert all(cg.kernels for cg in rt.compiled_graphs)
    text = rt.kiln_explain()
    assert "-- forward graph --" in text and "-- backward graph --" in text
