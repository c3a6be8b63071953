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
    assert LaunchConfig(64, 0, 8, 32).kwargs() == {"XBLOCK": 64, "YBLOCK": 32, "num_warps": 8, "sanitize_overflow": False}
    assert LaunchConfig(64, 0, 8, 32).constexprs() == (64, 32)
    assert LaunchConfig(*LaunchConfig(64, 0, 8, 32).as_list()) == LaunchConfig(64, 0, 8, 32)  # saved choices



def test_row_tiled_candidates_divide_rows_that_are_no_power_of_two():
    """Gathers of 768-long rows (embedding, index_select): the tuned candidates include blocks of 256
    (no masked-off lanes) and tiles of many rows; a power-of-two row length gets no such extra block."""
    def kernel(x, y):
        return type("K", (), {"style": "tiled", "row_tiles": True, "xnumel": x, "ynumel": y})()

    configs = candidate_configs(kernel(768, 16384))
    assert configs[0].XBLOCK == 1024 and all(c.XBLOCK <= 1024 and c.YBLOCK >= 1 for c in configs)
    assert {(c.XBLOCK, c.YBLOCK) for c in configs} >= {(256, 16), (256, 64), (1024, 16)}, configs
    assert not [c for c in candidate_configs(kernel(1024, 16384)) if c.XBLOCK < 512], "1024 needs no divisor block"
    assert len(candidate_configs(kernel(768, 16))) == 1  # too small to time: the heuristic's pick alone

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


# tiles by rows: per-row values loaded once per row -------------------------------------------------
def test_per_row_values_read_by_a_pad_are_loaded_once_per_row():
    """A loss gradient written into a padded buffer (GPT-2's LM head): the row statistics are per-row
    loads of a [YBLOCK, XBLOCK] tile (no ``//`` to find each element's row, no load per element), and the
    pad's read of the viewed input folds to its row (``InRange``)."""
    x, m = torch.randn(16, 8, 600), torch.randn(128)

    def f(x, m):
        rows = x.reshape(128, 600)
        return torch.nn.functional.pad((rows.exp() * m[:, None]).view(16, 8, 600), (0, 5)) + 1

    k = _only(check(f, x, m, atol=1e-5, rtol=1e-5))
    assert k.style == "tiled" and k.row_tiles and (k.ynumel, k.xnumel) == (128, 605), k.source
    (row_load,) = [line for line in k.source.splitlines() if "tl.load(in_ptr1" in line]
    assert "(8*x0 + x1)" in row_load and row_load.endswith("ymask, other=0)"), row_load
    (data_load,) = [line for line in k.source.splitlines() if "tl.load(in_ptr0" in line]
    assert "(4800*x0 + 600*x1 + x2)" in data_load, data_load  # (no // on the column: the view folded)
    assert candidate_configs(k)[0].YBLOCK >= 1 and candidate_configs(k)[0].XBLOCK >= 256


def test_a_pad_of_rows_and_columns():
    x, m = torch.randn(200, 330), torch.randn(200)

    def f(x, m):
        return torch.nn.functional.pad(x * m[:, None], (2, 3, 4, 1), value=0.5)

    assert _only(check(f, x, m, atol=1e-6, rtol=1e-6)).row_tiles


def test_row_conditions_still_mask_per_row_loads():
    """Rows of the second part read nothing of the first part's scale: a condition on the rows stays on
    a per-row load (only conditions on other axes are left off a load)."""
    a, b, s, t = torch.randn(100, 500), torch.randn(60, 500), torch.randn(100, 1), torch.randn(60, 1)
    k = _only(check(lambda a, b, s, t: torch.cat([a * s, b * t], dim=0), a, b, s, t))
    assert k.row_tiles
    loads = [line for line in k.source.splitlines() if "tl.load" in line and "x1" not in line]
    assert len(loads) == 2 and all("ymask & tmp" in line and "xmask" not in line for line in loads), loads


def test_cat_along_the_last_dim_of_per_row_scaled_parts():
    a, b, s = torch.randn(128, 300), torch.randn(128, 300), torch.randn(128, 1)
    k = _only(check(lambda a, b, s: torch.cat([a * s, b - s], dim=1), a, b, s))
    assert k.row_tiles


def test_small_or_short_rows_stay_one_dimensional():
    x, m = torch.randn(500, 30), torch.randn(500)
    k = _only(check(lambda x, m: x * m[:, None], x, m))
    assert k.style == "pointwise" and not k.row_tiles  # rows of 30: a tile would waste its lanes
