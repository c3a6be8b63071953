"""symbolic_meta.infer_dense_strides: the layout ATen gives a `.to(dtype)` copy of a tensor that is not dense."""
import random

import torch

from kiln.fake.symbolic_meta import infer_dense_strides


def _dense(x) -> bool:
    dims = sorted([d for d in range(x.dim()) if x.shape[d] != 1], key=x.stride)
    running = 1
    for d in dims:
        if x.stride(d) != running:
            return False
        running *= x.shape[d]
    return True


def _random_view(rng):
    nd = rng.randint(1, 4)
    x = torch.empty(*[rng.randint(1, 5) for _ in range(nd)]).permute(*rng.sample(range(nd), nd))
    for d in range(nd):
        r = rng.random()
        if r < 0.3 and x.shape[d] > 1:
            x = x.narrow(d, rng.randint(0, 1), max(1, x.shape[d] - rng.randint(1, x.shape[d] - 1)))
        elif r < 0.4:
            x = x[(slice(None),) * d + (slice(None, None, 2),)]
        elif r < 0.5 and x.shape[d] == 1:
            x = x.expand(*[3 if i == d else -1 for i in range(nd)])
    return x


def test_matches_eager_copies_of_random_views():
    rng = random.Random(0)
    checked = 0
    for _ in range(1500):
        x = _random_view(rng)
        if _dense(x):
            continue
        checked += 1
        want = list(x.to(torch.float64).stride())
        assert infer_dense_strides(list(x.shape), list(x.stride())) == want, (tuple(x.shape), x.stride())
    assert checked > 500


def test_zero_strides_keep_their_place():
    x = torch.empty(6, 1, 4, 1, 2).expand(6, 5, 4, 3, 2).permute(0, 1, 2, 3, 4)[:, :, :, :, :1]
    assert infer_dense_strides(list(x.shape), list(x.stride())) == list(x.to(torch.float64).stride())
