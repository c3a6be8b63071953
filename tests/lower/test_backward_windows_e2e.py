"""End to end: training graphs whose backward has window/resampling/norm backward ops compile through
kiln's codegen (joint graph, generated kernels, no ATen fallback) and match eager's outputs and input
gradients."""
import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

from kiln.aot.training import TrainingRuntime
from kiln.backends.kiln import kiln_backend

LIBRARY = ("(BLAS)", "library kernel", "ATen's generator")


def _grads(fn, inputs, cotangent_seed=0):
    inputs = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = fn(*inputs)
    outs = out if isinstance(out, (list, tuple)) else [out]
    gen = torch.Generator().manual_seed(cotangent_seed)
    cots = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
    wrt = [t for t in inputs if t.requires_grad]
    return [o.detach() for o in outs], list(torch.autograd.grad(outs, wrt, cots, allow_unused=True))


def check_training(fn, *inputs):
    graph = fx.Graph()
    placeholders = [graph.placeholder(f"t{i}") for i in range(len(inputs))]
    graph.output(graph.call_function(fn, tuple(placeholders)))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    example = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    compiled = kiln_backend(gm, example)
    assert isinstance(compiled, TrainingRuntime) and compiled.codegen_complete, "not kiln's training codegen"
    externs = [f"{s.node.node.op}: {s.node.node.reason}" for cg in compiled.compiled_graphs for s in cg.sched.steps
               if not hasattr(s, "members")]
    fallbacks = [e for e in externs if not any(w in e for w in LIBRARY)]
    assert not fallbacks, f"ATen fallbacks: {fallbacks}"
    expected, expected_grads = _grads(fn, inputs)
    got, got_grads = _grads(lambda *ts: compiled(*ts), inputs)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_grads, expected_grads, atol=1e-5, rtol=1e-5)


def test_pooling_backward():
    x = torch.randn(2, 3, 9, 8)
    check_training(lambda t: [F.avg_pool2d(t * 2, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                              F.adaptive_avg_pool2d(t, (4, 3)), F.adaptive_max_pool2d(t.sin(), (3, 5))], x)
    y = torch.randn(1, 2, 5, 6, 7)
    check_training(lambda t: [F.avg_pool3d(t, (2, 3, 2), (1, 2, 2), (1, 1, 0)), F.adaptive_avg_pool3d(t, (2, 4, 3)),
                              F.adaptive_max_pool3d(t, (3, 2, 4))], y)


def test_upsample_and_pad_backward():
    x = torch.randn(2, 3, 5, 6)
    check_training(lambda t: [F.interpolate(t, scale_factor=1.7, mode="nearest"),
                              F.interpolate(t, size=(9, 4), mode="nearest-exact"),
                              F.interpolate(t, size=(8, 11), mode="bilinear", align_corners=False),
                              F.interpolate(t, size=(3, 13), mode="bilinear", align_corners=True),
                              F.interpolate(t, size=(7, 9), mode="bicubic", align_corners=False)], x)
    check_training(lambda t: [F.pad(t, (2, 1, 3, 2), mode="reflect").relu(), F.pad(t, (4, 0, 1, 3), mode="replicate"),
                              F.interpolate(t[0], size=7, mode="linear")], x)
    v = torch.randn(2, 3, 4, 5, 6)
    check_training(lambda t: [F.pad(t, (1, 2, 1, 0, 2, 1), mode="replicate"), F.interpolate(t, size=(3, 7, 4), mode="trilinear"),
                              F.interpolate(t, scale_factor=(2, 1.5, 0.7), mode="nearest")], v)


def test_unfold_norm_and_activation_backward():
    x = torch.randn(4, 10, 3)
    check_training(lambda t: [t.unfold(1, 3, 2) * 2, t.unfold(0, 2, 1).exp()], x)
    img = torch.randn(2, 3, 7, 6)
    check_training(lambda t: [F.unfold(t, (2, 3), dilation=(2, 1), padding=1, stride=(1, 2)),
                              F.fold(F.unfold(t, 2).sin(), (7, 6), 2)], img)
    g = torch.randn(2, 6, 5, 3)
    w, b = torch.randn(6), torch.randn(6)
    check_training(lambda t, w, b: [F.group_norm(t, 3, w, b), F.mish(t), F.prelu(t, w)], g, w, b)
    v = torch.randn(4, 3, 2)
    gn = torch.randn(4, 1, 1)
    check_training(lambda v, g: torch._weight_norm(v, g, 0) * 3, v, gn)


def test_masked_scatter_backward():
    x, mask, src = torch.randn(3, 4), torch.rand(3, 4) > 0.5, torch.randn(15)
    check_training(lambda x, m, s: x.masked_scatter(m, s) * 2, x, mask, src)


def test_cdist_backward():
    a, b = torch.randn(2, 4, 3), torch.randn(2, 5, 3)
    check_training(lambda a, b: [torch.cdist(a, b, p=1.5), torch.cdist(a, b, p=2.0) * 2, torch.cdist(a, b, p=1.0)], a, b)


@pytest.mark.parametrize("k,s,p,ceil", [(3, 2, 1, False), (3, 1, 1, False), (2, 2, 0, False), (3, 2, 1, True),
                                        ((2, 3), (2, 1), (1, 0), True)])
def test_max_pool2d_backward_is_one_gather_kernel(k, s, p, ceil):
    # each input position gathers the gradients of the windows that picked it: one pointwise kernel,
    # no scatter-add (atomics on the GPU), equal to ATen's, ties included (windows overlap)
    from tests.lower.helpers import check

    x = torch.randn(2, 3, 11, 10)
    x.view(-1)[::7] = 0.0  # ties: several windows pick one position
    out, idx = F.max_pool2d(x, k, s, p, ceil_mode=ceil, return_indices=True)
    grad = torch.randn_like(out)
    kk, ss, pp = ([v, v] if isinstance(v, int) else list(v) for v in (k, s, p))

    def f(grad, x, idx):
        return torch.ops.aten.max_pool2d_with_indices_backward(grad * 2, x, kk, ss, pp, [1, 1], ceil, idx)

    cg = check(f, grad, x, idx, kernels=1)
    assert "scatter" not in cg.lg.format()
