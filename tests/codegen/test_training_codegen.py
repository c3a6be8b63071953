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


def _mm_with_full_precision_block(x, w):
    y = torch.mm(x, w)  # bfloat16 under autocast
    with torch.autocast("cpu", enabled=False):
        z = torch.mm(y.float(), w.float())  # float32: the block turns autocast off
    return y, z.sin()


def test_autocast_graph_runs_as_traced_and_backward_outside_autocast():
    # the compiled graphs already hold autocast's casts: running them under the caller's autocast
    # recast the float32 mm to bfloat16; the backward is traced without autocast, as eager runs it
    # when backward() is called outside the autocast block
    torch.manual_seed(0)
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    results = []
    for name, fn in (("eager", _mm_with_full_precision_block),
                     ("kiln", kiln.compile(_mm_with_full_precision_block, backend="kiln"))):
        wi = w.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, z = fn(x, wi)
        (y.float().square().sum() + z.sum()).backward()
        results.append((y, z, wi.grad))
    (ey, ez, eg), (ky, kz, kg) = results
    assert (ky.dtype, kz.dtype) == (torch.bfloat16, torch.float32)
    torch.testing.assert_close((ky, kz, kg), (ey, ez, eg), atol=1e-5, rtol=1e-5)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # inference: AtenRuntime
        _, kz = kiln.compile(_mm_with_full_precision_block, backend="kiln")(x, w)
    assert kz.dtype == torch.float32
