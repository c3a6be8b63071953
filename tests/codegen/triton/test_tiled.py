"""Tiled pointwise kernels: a group that transposes runs [YBLOCK, XBLOCK] tiles, coalesced both ways."""
import pytest
import torch

from kiln.codegen.triton.launch import LaunchConfig, candidate_configs, grid
from tests.codegen.triton.helpers import check


def _only(cg):
    (k,) = cg.kernels.values()
    return k


def test_a_transposed_copy_is_tiled_and_masked_at_both_ragged_edges():
    # 40 x 50 per batch: with 16 x 16 tiles neither loop divides evenly
    cg = check(lambda x: x.transpose(1, 2).contiguous() * 2, torch.randn(3, 40, 50), triton_max_block=16)
    k = _only(cg)
    assert k.style == "tiled" and (k.ynumel, k.xnumel) == (50, 3 * 40)
    assert "ymask & xmask" in k.source and "x1 = yindex" in k.source
    assert k.fn.config == LaunchConfig(16, 0, 1, 16) and k.fn.grid == (8 * 4,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_tiled_dtypes_and_a_per_row_operand(dtype):
    x = (torch.randn(2, 33, 70) * 10).to(dtype)
    s = (torch.randn(70, 1) * 3).to(dtype)

    def f(x, s):  # s is read once per tile row (y only): no transpose of its own
        return (x.permute(0, 2, 1) * s + 1).contiguous()

    k = _only(check(f, x, s, atol=1e-2, rtol=1e-2))
    assert k.style == "tiled"


def test_attention_key_transpose_with_a_split_view_is_tiled():
    # k (batch, seq, heads * dim) -> (batch * heads, dim, seq): the read runs along dim (x % 16 of
    # the split view), the write along seq
    x = torch.randn(2, 48, 4 * 16)

    def f(x):
        return x.view(2, 48, 4, 16).permute(0, 2, 3, 1).reshape(8, 16, 48) * 0.25

    k = _only(check(f, x))
    assert k.style == "tiled"


def test_channels_last_conversion_is_tiled():
    x = torch.randn(2, 24, 5, 20)  # read along W, written along C
    k = _only(check(lambda x: x.to(memory_format=torch.channels_last) + 1, x))
    assert k.style == "tiled"


def test_no_tiles_without_a_transpose():
    x, b = torch.randn(40, 50), torch.randn(40, 1)
    assert _only(check(lambda x, b: x * b + 1, x, b)).style == "pointwise"  # a per-row operand
    assert _only(check(lambda x: x[:, ::2] * 2, x)).style == "pointwise"  # strided, not transposed
    # a short last loop (an RGB triple) is not worth a tile
    assert _only(check(lambda x: x.permute(1, 0).contiguous() + 1, torch.randn(3, 200))).style == "pointwise"


def test_tiled_configs_and_grid():
    class K:
        style, xnumel, ynumel = "tiled", 4096, 1000

    configs = candidate_configs(K())
    assert configs[0] == LaunchConfig(64, 0, 8, 64) and all(c.YBLOCK for c in configs) and len(configs) > 1
    assert grid(K(), LaunchConfig(64, 0, 8, 64)) == (64 * 16,)
    assert LaunchConfig(64, 0, 8, 32).kwargs() == {"XBLOCK": 64, "YBLOCK": 32, "num_warps": 8}
    assert LaunchConfig(64, 0, 8, 32).constexprs() == (64, 32)
    assert LaunchConfig(*LaunchConfig(64, 0, 8, 32).as_list()) == LaunchConfig(64, 0, 8, 32)  # saved choices


def test_tiled_groups_with_several_members_padding_and_a_second_transposed_input():
    x, y = torch.randn(4, 20, 36), torch.randn(4, 36, 20)
    cases = [
        lambda x, y: ((x.transpose(1, 2) * 2).contiguous(), (x.transpose(1, 2) + 1).contiguous().sin()),
        lambda x, y: torch.nn.functional.pad(x.transpose(1, 2), (1, 2)).contiguous() * y.sum(),
        lambda x, y: x + y.transpose(1, 2),
        lambda x, y: (x * 10).long().transpose(1, 2).contiguous() + y.bfloat16().float().long(),
    ]
    for fn in cases:
        cg = check(fn, x, y, triton_max_block=16)
        assert "tiled" in {k.style for k in cg.kernels.values()}
