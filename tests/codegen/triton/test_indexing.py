"""Masked and indirect loads (cat, pad, gather, index, flip) in generated Triton, against eager."""
import torch

from tests.codegen.triton.helpers import check


def test_cat_and_pad_read_only_inside_their_inputs():
    def f(a, b):
        return torch.cat([a, b * 2], dim=1), torch.nn.functional.pad(a, (1, 2), value=-1.0)

    check(f, torch.randn(3, 4), torch.randn(3, 5))


def test_gather_index_and_flip_use_loaded_indices():
    def f(x, idx, rows):
        return torch.gather(x, 1, idx), x[rows] + 1, x.flip(1).exp()

    x = torch.randn(4, 6)
    idx = torch.randint(0, 6, (4, 3))
    rows = torch.tensor([3, -1, 0])
    check(f, x, idx, rows)
