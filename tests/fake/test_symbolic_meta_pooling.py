"""kiln's pooling shape rules (fake/symbolic_meta.py) against ATen's kernels on concrete sizes."""
import pytest
import torch

from kiln.fake.symbolic_meta import RULES

aten = torch.ops.aten
CONFIGS = [((2,), (), 0, False), ((3,), (2,), 1, False), ((3,), (2,), 0, True), ((2, 3), (1, 2), (1, 0), True),
           ((5,), (3,), 2, True)]


@pytest.mark.parametrize("kernel,stride,padding,ceil", CONFIGS)
@pytest.mark.parametrize("hw", [(9, 9), (10, 7), (16, 11)])
def test_pool_rules_match_aten(kernel, stride, padding, ceil, hw):
    x = torch.randn(2, 3, *hw)
    meta = x.to("meta")
    want = torch.ops.aten.max_pool2d_with_indices(x, kernel, stride, padding, 1, ceil)
    got = RULES[aten.max_pool2d_with_indices.default](None, meta, kernel, stride, padding, 1, ceil)
    assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in want]
    assert got[1].dtype == torch.int64
    want = aten.avg_pool2d(x, kernel, stride, padding, ceil)
    got = RULES[aten.avg_pool2d.default](None, meta, kernel, stride, padding, ceil)
    assert tuple(got.shape) == tuple(want.shape) and got.stride() == want.stride()


def test_pool_rule_raises_for_too_small_inputs_and_defers_other_layouts():
    with pytest.raises(RuntimeError, match="too small"):
        RULES[aten.avg_pool2d.default](None, torch.empty(1, 1, 2, 2, device="meta"), [3])
    cl = torch.empty(1, 3, 4, 4, device="meta").to(memory_format=torch.channels_last)
    assert RULES[aten.avg_pool2d.default](None, cl, [2]) is None
