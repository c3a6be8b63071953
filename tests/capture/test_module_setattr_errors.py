"""nn.Module.__setattr__'s TypeError for a plain tensor assigned to a parameter's name is raised where the
program runs the store, so its own try/except sees it (the store is replayed after the graph: the error
escaped past the handler)."""
import pytest
import torch

import kiln


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))

    def forward(self, x):
        try:
            self.w = self.w * 2
            caught = False
        except TypeError as exc:
            caught = str(exc)
        return caught, x + 1


def test_caught_by_the_program():
    want, got = M()(torch.ones(2)), kiln.compile(M())(torch.ones(2))
    assert got[0] == want[0] and "as parameter 'w'" in got[0]
    torch.testing.assert_close(got[1], want[1])


def test_uncaught_as_eager():
    class N(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

        def forward(self, x):
            self.w = x.double()
            return x

    with pytest.raises(TypeError) as want:
        N()(torch.ones(2))
    with pytest.raises(TypeError) as got:
        kiln.compile(N())(torch.ones(2))
    assert str(got.value) == str(want.value)


def test_parameter_and_none_still_assign():
    class P(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

        def forward(self, x):
            self.w = torch.nn.Parameter(x * 3)
            return self.w.sum()

    eager, mine = P(), P()
    got = kiln.compile(mine)(torch.ones(2))
    torch.testing.assert_close(got, eager(torch.ones(2)))
    torch.testing.assert_close(mine.w, eager.w)
