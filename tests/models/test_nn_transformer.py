"""End-to-end: torch.nn's TransformerEncoderLayer / TransformerEncoder / MultiheadAttention in eval mode
without grad, through kiln's backend, against eager. Eager runs the fused fast-path op; kiln captures it
in one graph and decomposes it (kiln/decomp/transformer.py) into kernels and matmuls."""
import pytest
import torch
import torch.nn as nn

import kiln

B, T, E, H, FF = 2, 8, 32, 4, 64
FUSED_OPS = ("aten._transformer_encoder_layer_fwd", "aten._native_multi_head_attention")


def setup_function():
    kiln.reset()


def _padding():
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[0, [1, 4]] = True
    mask[1, 6:] = True
    return mask


def _run(module, *args, backend="kiln", **kwargs):
    """Explain report of one compiled call under no_grad; the result must equal eager's."""
    torch.manual_seed(0)
    with torch.no_grad():
        expected = module(*args, **kwargs)
        report = kiln.explain(module, backend=backend)(*args, **kwargs)
    torch.testing.assert_close(report.result, expected, equal_nan=True)
    assert (report.graph_count, report.graph_break_count) == (1, 0), str(report)
    assert not any(op in text for op in FUSED_OPS for text in report.backend_reports), "a fused op ran whole"
    return report


def _layer(activation, norm_first):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, FF, batch_first=True, dropout=0.0, activation=activation,
                                       norm_first=norm_first)
    for norm in (layer.norm1, layer.norm2):
        nn.init.normal_(norm.weight, 1.0, 0.2), nn.init.normal_(norm.bias, 0.0, 0.2)
    return layer.eval()


@pytest.mark.parametrize("masks", ["none", "key_padding", "src_mask", "both"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "norm_first"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_aot_eager(activation, norm_first, masks):
    """The decomposition inside the ATen trace (backend aot_eager: ATen graph run op by op)."""
    kwargs = {"src_key_padding_mask": _padding()} if masks in ("key_padding", "both") else {}
    if masks in ("src_mask", "both"):
        kwargs["src_mask"] = torch.rand(T, T, generator=torch.Generator().manual_seed(1)) < 0.3
    _run(_layer(activation, norm_first), torch.randn(B, T, E), backend="aot_eager", **kwargs)


@pytest.mark.parametrize("activation,norm_first,padding", [("relu", False, False), ("gelu", True, True)])
def test_encoder_layer_kiln(activation, norm_first, padding):
    kwargs = {"src_key_padding_mask": _padding()} if padding else {}
    _run(_layer(activation, norm_first), torch.randn(B, T, E), **kwargs)


def test_fully_masked_row_is_nan_as_in_eager():
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[1] = True
    report = _run(_layer("relu", False), torch.randn(B, T, E), src_key_padding_mask=padding)
    assert report.result[1].isnan().all() and not report.result[0].isnan().any()


def test_encoder_of_two_layers_kiln():
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(_layer("gelu", False), 2, norm=nn.LayerNorm(E)).eval()
    _run(encoder, torch.randn(B, T, E))


@pytest.mark.parametrize("kwargs", [{}, {"need_weights": False}, {"average_attn_weights": False}],
                         ids=["mean_weights", "no_weights", "per_head_weights"])
def test_multi_head_attention_kiln(kwargs):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, H, batch_first=True).eval()
    x = torch.randn(B, T, E)
    _run(mha, x, x, x, key_padding_mask=_padding(), **kwargs)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("padding", [False, True], ids=["no_mask", "key_padding"])
def test_encoder_layer_cuda(dtype, padding):
    """On CUDA: no mask keeps eager's fused attention kernel (SDPA); a mask (with a fully masked row:
    NaN, as CUDA's masked softmax) goes through the math pattern."""
    layer = _layer("gelu", False).to("cuda", dtype)
    x = torch.randn(B, T, E, device="cuda", dtype=dtype)
    kwargs = {}
    if padding:
        mask = _padding().cuda()
        mask[1] = True
        kwargs["src_key_padding_mask"] = mask
    # float32: eager's fused CUDA kernels and kiln's (same SDPA kernel, other matmul/layer-norm kernels)
    # differ by up to ~1e-4 here (H100, torch 2.11), the tolerance of kiln's other CUDA model tests
    tol = {"atol": 2e-3, "rtol": 2e-3} if dtype == torch.float16 else {"atol": 1e-4, "rtol": 1e-4}
    torch.manual_seed(0)
    with torch.no_grad():
        expected = layer(x, **kwargs)
        report = kiln.explain(layer)(x, **kwargs)
    torch.testing.assert_close(report.result, expected, equal_nan=True, **tol)
    assert (report.graph_count, report.graph_break_count) == (1, 0), str(report)
