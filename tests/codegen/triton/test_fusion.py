"""Fused groups become one Triton kernel: softmax and layer_norm rows, pointwise chains."""
import torch

from kiln.aot.graph import format_graph

from tests.codegen.triton.helpers import check


def softmax(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)


def test_softmax_is_one_persistent_kernel():
    cg = check(softmax, torch.randn(5, 33), kernels=1)
    (k,) = cg.kernels.values()
    assert k.style == "persistent"
    assert k.name.startswith("triton_fused_amax_sum_mul_")  # CPU tensors: exp times 1/sum, as ATen's CPU kernel
    assert "kernel-local" in k.source


def test_softmax_looped_when_rows_are_long():
    cg = check(softmax, torch.randn(3, 70), kernels=1, triton_persistent_max=16, triton_max_block=16)
    (k,) = cg.kernels.values()
    assert k.style == "looped"
    assert "for roffset in range(0, 70, RBLOCK)" in k.source


def test_layer_norm_is_one_kernel():
    x, w, b = torch.randn(6, 40), torch.randn(40), torch.randn(40)
    check(layer_norm, x, w, b, kernels=1, atol=1e-4)


def test_layer_norm_looped():
    x, w, b = torch.randn(4, 50), torch.randn(50), torch.randn(50)
    check(layer_norm, x, w, b, kernels=1, atol=1e-4, triton_persistent_max=16, triton_max_block=16)


def test_pointwise_chain_is_one_kernel():
    def f(x, y):
        return torch.relu(x * y + 1).sigmoid() - torch.tanh(y)

    cg = check(f, torch.randn(7, 9), torch.randn(7, 9), kernels=1)
    (k,) = cg.kernels.values()
    assert k.style == "pointwise"


def test_header_lists_source_ops():
    cg = check(softmax, torch.randn(2, 8))
    src = next(iter(cg.kernels.values())).source
    assert "aten.amax.default" in src and "aten.mul.Tensor" in src


def test_mlp_with_extern_matmuls():
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16),
                            torch.nn.LayerNorm(16)).eval()
    with torch.no_grad():
        cg = check(m, torch.randn(4, 16), atol=1e-5)
    assert len(cg.kernels) == 2  # gelu (after addmm), layer_norm (after addmm); the matmuls run in ATen


def test_bf16_linear_rounds_once_like_eager():
    # eager's addmm adds the bias to the float32 accumulator and rounds once; kiln keeps addmm whole in
    # bfloat16 (mm then add would round the product first and differ from eager by an ulp here and there)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU()).eval().to(torch.bfloat16)
    x = torch.randn(32, 64).to(torch.bfloat16)
    with torch.no_grad():
        cg = check(m, x, atol=0, rtol=0)
    assert "aten.addmm.default" in format_graph(cg.gm.graph)
