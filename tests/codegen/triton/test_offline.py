"""Generated kernels compile for an NVIDIA GPU (sm_90) with Triton's real compiler and ptxas, on a
machine without one: catches code the interpreter accepts but the compiler rejects."""
import pytest
import torch

pytest.importorskip("triton")

from kiln.codegen.triton.offline import compile_for_gpu, kernel_signature  # noqa: E402
from tests.codegen.triton.helpers import compile_fn  # noqa: E402


def _ptxas_available() -> bool:
    from kiln.codegen.triton.offline import toolchain_missing

    return toolchain_missing(90) is None


needs_ptxas = pytest.mark.skipif(not _ptxas_available(), reason="Triton's NVIDIA backend (ptxas) is not installed")


def test_signature_types_pointers_by_dtype():
    x = torch.randn(4, 8).to(torch.bfloat16)
    _, cg = compile_fn(lambda x: (x.float().sum(1) > 0).to(torch.int64), [x])
    (k,) = cg.kernels.values()
    sig = kernel_signature(k, cg.lg.buffers())
    assert sig == {"in_ptr0": "*bf16", "out_ptr0": "*i64", "XBLOCK": "constexpr", "RBLOCK": "constexpr"}


@needs_ptxas
def test_bf16_layer_norm_and_argmax_compile_for_sm90():
    x, w = torch.randn(8, 96).to(torch.bfloat16), torch.randn(96).to(torch.bfloat16)

    def f(x, w):
        y = torch.nn.functional.layer_norm(x, (96,), w)
        return y, y.argmax(-1), (x > 0).any(-1)

    _, cg = compile_fn(f, [x, w])
    errors = compile_for_gpu(cg)
    assert errors and all(e is None for e in errors.values()), errors


@needs_ptxas
def test_rounding_divisions_compile_for_sm90():
    a, b, c, d = torch.randn(64), torch.randn(64), torch.randn(64).bfloat16(), torch.randn(64).bfloat16()

    def f(a, b, c, d):
        return torch.div(a, b, rounding_mode="trunc"), torch.div(c, d, rounding_mode="floor")

    _, cg = compile_fn(f, [a, b, c, d])
    assert "div_rn" in cg.source  # IEEE division before trunc: '/' is approximate on the GPU
    errors = compile_for_gpu(cg)
    assert errors and all(e is None for e in errors.values()), errors


def test_matmul_template_signature():
    from kiln.codegen.triton.matmul import CONSTEXPRS, MatmulKernel

    _, cg = compile_fn(lambda a, b: (a @ b).relu(), [torch.randn(20, 24), torch.randn(24, 18)], matmul_templates=True)
    (k,) = [k for k in cg.kernels.values() if isinstance(k, MatmulKernel)]
    sig = kernel_signature(k, cg.lg.buffers())
    assert sig == {"in_ptr0": "*fp32", "in_ptr1": "*fp32", "out_ptr0": "*fp32", **{c: "constexpr" for c in CONSTEXPRS}}


@needs_ptxas
def test_matmul_templates_compile_for_sm90():
    a, b, bias, r = torch.randn(40, 70).bfloat16(), torch.randn(50, 70).bfloat16(), torch.randn(50).bfloat16(), \
        torch.randn(40, 50).bfloat16()
    c, d = torch.randn(33, 17), torch.randn(17, 9)

    def f(a, b, bias, r, c, d):
        return torch.nn.functional.gelu(torch.addmm(bias, a, b.t())) + r, c @ d

    _, cg = compile_fn(f, [a, b, bias, r, c, d], matmul_templates=True)
    errors = compile_for_gpu(cg)  # bf16 addmm + epilogue, its library-path epilogue, f32 mm
    assert len(errors) == 3 and all(e is None for e in errors.values()), errors


@needs_ptxas
def test_online_softmax_compiles_for_sm90():
    x = torch.randn(4, 8192).to(torch.bfloat16)
    _, cg = compile_fn(lambda x: (torch.softmax(x.float(), -1), torch.log_softmax(x, -1)), [x])
    assert "online softmax" in cg.source
    errors = compile_for_gpu(cg)
    assert errors and all(e is None for e in errors.values()), errors


@needs_ptxas
def test_tiled_transposes_compile_for_sm90():
    x, s = torch.randn(2, 48, 64).to(torch.bfloat16), torch.randn(64, 1).to(torch.bfloat16)

    def f(x, s):
        return (x.transpose(1, 2) * s).contiguous(), x.view(2, 48, 4, 16).permute(0, 2, 3, 1).reshape(8, 16, 48).float() + 1

    _, cg = compile_fn(f, [x, s])
    assert {k.style for k in cg.kernels.values()} == {"tiled"}
    k = next(iter(cg.kernels.values()))
    assert list(kernel_signature(k, cg.lg.buffers()))[-2:] == ["XBLOCK", "YBLOCK"]
    errors = compile_for_gpu(cg, all_configs=True)
    assert errors and all(e is None for e in errors.values()), errors


@needs_ptxas
def test_max_pool_backward_gather_and_column_sums_compile_for_sm90():
    # the gather form of max pooling's backward (masked loads at computed window positions, bf16) and a
    # column reduction with its wide-block configs build for the real GPU, not only in the interpreter
    import torch.nn.functional as F

    x = torch.randn(2, 4, 11, 10).to(torch.bfloat16)
    out, idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    grad = torch.randn_like(out)

    def f(grad, x, idx, m):
        gx = torch.ops.aten.max_pool2d_with_indices_backward(grad, x, [3, 3], [2, 2], [1, 1], [1, 1], False, idx)
        return gx, m.float().sum(0)

    _, cg = compile_fn(f, [grad, x, idx, torch.randn(300, 40).to(torch.bfloat16)])
    errors = compile_for_gpu(cg, all_configs=True)
    assert errors and all(e is None for e in errors.values()), errors


@needs_ptxas
def test_masked_load_at_a_constant_address_compiles_for_sm90():
    """diagflat of a 0-d tensor: the load's address is the constant 0, its mask a [1] block (the
    diagonal's condition); Triton rejects a block mask on a scalar pointer, so the pointer is widened."""
    _, cg = compile_fn(lambda x: torch.diagflat(x), [torch.randn(())])
    assert "tl.load(in_ptr0 + ((0) + tl.full(" in cg.source, cg.source
    errors = compile_for_gpu(cg)
    assert errors and all(e is None for e in errors.values()), errors


@needs_ptxas
def test_check_arch_option_builds_interpreted_kernels_for_the_gpu(monkeypatch):
    """``Options.triton_check_arch`` (KILN_TRITON_CHECK_ARCH): a graph whose kernels build runs as usual;
    a kernel the GPU compiler rejects fails the compile with the kernel's name and the error."""
    import kiln
    from kiln.codegen.triton import offline
    from kiln.errors import BackendError

    x = torch.randn(6, 5)
    opts = {"cpu_codegen": "triton", "triton_check_arch": 90, "choose_faster": False}
    torch.testing.assert_close(kiln.compile(lambda x: (x * 2).sum(1), options=opts)(x), (x * 2).sum(1))
    monkeypatch.setattr(offline, "compile_for_gpu", lambda cg, arch, options: {"triton_bad_0": "CompilationError: at 1:1"})
    with pytest.raises(BackendError, match="1 Triton kernel.s. do not build for sm_90 .KILN_TRITON_CHECK_ARCH.: triton_bad_0"):
        kiln.compile(lambda x: (x + 3).relu(), options=opts)(x)
