"""The decompositions of the fused transformer fast paths (kiln/decomp/transformer.py) against the ATen
ops themselves, called directly on real tensors: every mask type, masks that remove whole rows (NaN in
eager, as in the decomposition), float masks (any nonzero entry removes the key), activations, norm
placement, attention weights; the calls it leaves whole return NotImplemented."""
import pytest
import torch
import torch.nn as nn

from kiln.decomp import decomposition_table

aten = torch.ops.aten
TABLE = decomposition_table()
LAYER = aten._transformer_encoder_layer_fwd.default
MHA = aten._native_multi_head_attention.default
B, T, E, H, FF = 2, 8, 32, 4, 64


def _layer_args(use_gelu: bool, norm_first: bool, dtype=torch.float32):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, FF, batch_first=True, dropout=0.0, norm_first=norm_first).to(dtype)
    for p in layer.parameters():  # layer norms with non-trivial weights and biases too
        nn.init.normal_(p, std=0.3)
    a = layer.self_attn
    x = torch.randn(B, T, E, dtype=dtype)
    return (x, E, H, a.in_proj_weight, a.in_proj_bias, a.out_proj.weight, a.out_proj.bias, use_gelu, norm_first,
            1e-5, layer.norm1.weight, layer.norm1.bias, layer.norm2.weight, layer.norm2.bias,
            layer.linear1.weight, layer.linear1.bias, layer.linear2.weight, layer.linear2.bias)


def _masks():
    g = torch.Generator().manual_seed(1)
    padding = torch.rand(B, T, generator=g) < 0.3
    padding[:, 0] = False
    return {
        "none": (None, None),
        "padding_bool": (padding, 1),
        "padding_float": (torch.zeros(B, T).masked_fill(padding, float("-inf")), 1),
        "square_bool": (torch.rand(T, T, generator=g) < 0.3, 0),
        "merged_bool": (torch.rand(B, H, T, T, generator=g) < 0.3, 2),
        "merged_float": (torch.zeros(B, H, T, T).masked_fill(torch.rand(B, H, T, T, generator=g) < 0.3, float("-inf")), 2),
        "float_nonzero_masks": (torch.rand(B, T, generator=g) * (torch.rand(B, T, generator=g) < 0.5), 1),
        "whole_row_masked": (torch.tensor([[False] * T, [True] * T]), 1),
    }


def _compare(op, args):
    with torch.no_grad():
        want = op(*args)
        got = TABLE[op](*args)
    assert got is not NotImplemented
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-4)
    return want


@pytest.mark.parametrize("mask", list(_masks()))
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "norm_first"])
@pytest.mark.parametrize("use_gelu", [False, True], ids=["relu", "gelu"])
def test_encoder_layer_matches_aten(use_gelu, norm_first, mask):
    want = _compare(LAYER, _layer_args(use_gelu, norm_first) + _masks()[mask])
    assert want.isnan().any() == (mask == "whole_row_masked")  # the case really removes a whole row


def test_encoder_layer_float64():
    _compare(LAYER, _layer_args(True, False, torch.float64) + (None, None))


def test_encoder_layer_empty_input():
    args = _layer_args(False, False)
    assert _compare(LAYER, (args[0][:, :0],) + args[1:] + (None, None)).shape == (B, 0, E)


@pytest.mark.parametrize("mask_type", [None, 3])
def test_encoder_layer_unknown_mask_type_is_left_whole(mask_type):
    args = _layer_args(False, False) + (torch.zeros(B, T, dtype=torch.bool), mask_type)
    assert TABLE[LAYER](*args) is NotImplemented


def test_encoder_layer_mask_of_wrong_shape_is_left_whole():
    args = _layer_args(False, False) + (torch.zeros(T, T, dtype=torch.bool), 1)
    assert TABLE[LAYER](*args) is NotImplemented


def _mha_args(mask, mask_type, need_weights, average):
    torch.manual_seed(0)
    m = nn.MultiheadAttention(E, H, batch_first=True)
    x = torch.randn(B, T, E)
    return (x, x, x, E, H, m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias, mask,
            need_weights, average, mask_type)


@pytest.mark.parametrize("mask", ["none", "padding_bool", "merged_float", "whole_row_masked"])
@pytest.mark.parametrize("weights", ["no_weights", "mean_weights", "per_head_weights"])
def test_native_multi_head_attention_matches_aten(mask, weights):
    need, average = weights != "no_weights", weights == "mean_weights"
    want = _compare(MHA, _mha_args(*_masks()[mask], need, average))
    assert (want[1] is None) == (not need)


@pytest.mark.parametrize("inputs", ["distinct_key", "distinct_value", "all_distinct"])
def test_native_multi_head_attention_of_distinct_inputs(inputs):
    """Called directly, the op projects distinct query/key/value (of one shape) with slices of qkv_weight."""
    args = list(_mha_args(None, None, True, True))
    x = args[0]
    other = lambda: torch.randn_like(x)  # noqa: E731
    args[1:3] = {"distinct_key": (other(),) * 2, "distinct_value": (x, other()),
                 "all_distinct": (other(), other())}[inputs]
    _compare(MHA, args)


def test_native_multi_head_attention_of_other_shapes_is_left_whole():
    args = list(_mha_args(None, None, False, True))
    args[1] = args[2] = torch.randn(B, T + 1, E)
    assert TABLE[MHA](*args) is NotImplemented
