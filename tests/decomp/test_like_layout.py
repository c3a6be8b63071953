"""Tensors made "like" another (``zeros_like``, ``full_like``, ``rand_like``, the functional ``fill``/``zero``)
have eager's layout: a transposed or channels-last input gives a transposed or channels-last result
(``empty_like``'s preserve format), and the random ones draw eager's numbers, which its kernels assign
in memory order (a row-major draw put them at other positions: wrong values with a seed)."""
from __future__ import annotations

import pytest
import torch

import kiln


def _makers(x):
    return (torch.zeros_like(x) + 1, torch.ones_like(x), torch.full_like(x, 3.0), torch.empty_like(x).fill_(2),
            torch.fill(x, 5.0), torch.rand_like(x), torch.randn_like(x) * x,
            torch.rand_like(x, memory_format=torch.contiguous_format))


INPUTS = {
    "contiguous": lambda: torch.randn(4, 3),
    "transposed": lambda: torch.randn(4, 3).t(),
    "channels_last": lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
    "sliced": lambda: torch.randn(4, 6)[:, ::2],  # not dense: dense strides in its order (row-major here)
    "transposed_sliced": lambda: torch.randn(6, 4).t()[:, ::2],  # not dense, column-major order
    "expanded": lambda: torch.randn(3, 1).expand(3, 4),
}


def test_like_strides_are_atens_for_any_layout():
    import random

    from kiln.decomp.utils import like_strides

    rng = random.Random(0)
    for _ in range(500):
        sizes = [rng.choice([1, 2, 3, 4]) for _ in range(rng.randint(1, 4))]
        strides = [rng.choice([0, 1, 2, 3, 5, 8, 12, 24]) for _ in sizes]
        x = torch.empty(300).as_strided(sizes, strides)
        assert like_strides(x) == list(torch.empty_like(x).stride()), (sizes, strides)


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
@pytest.mark.parametrize("kind", list(INPUTS))
def test_like_makers_have_eagers_layout_and_numbers(kind, backend):
    kiln.reset()
    x = INPUTS[kind]()
    compiled = kiln.compile(_makers, backend=backend)
    torch.manual_seed(0)
    got = compiled(x)
    torch.manual_seed(0)
    want = _makers(x)
    for i, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, msg=f"output {i}")
        assert g.stride() == w.stride(), (i, g.stride(), w.stride())
