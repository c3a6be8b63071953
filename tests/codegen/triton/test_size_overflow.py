"""Size expressions of a size-generic Triton kernel that do not fit 32 bits part-way: ``arange(0, 6 * n,
n)`` has ``(7*n - 1) // n`` = 6 elements, which a kernel computing it in int32 for ``n = 2**30`` got wrong
(every element masked off: the output was never written). The wrapper computes such expressions in
Python (``loopir.sizes.exact_sizes``)."""
import pytest
import torch

import kiln
from kiln.codegen.triton.kernel import _py
from kiln.loopir.index import FloorDiv
from kiln.loopir.sizes import size_context

pytest.importorskip("triton")


def test_arange_with_a_huge_symbolic_step_on_triton():
    def f(x, n: int):
        return torch.arange(0, 6 * n, n) + x

    kiln.reset()
    compiled = kiln.compile(f, dynamic=True, options={"cpu_codegen": "triton", "warm_cache": False,
                                                     "choose_faster": False})
    for n in (3, 5, 2 ** 30, 2 ** 31 + 5):
        x = torch.zeros(6, dtype=torch.int64)
        assert torch.equal(compiled(x, n), f(x, n)), n


def test_composite_size_parts_become_wrapper_values():
    import sympy

    from kiln.fake.symbolic import ShapeEnv

    env = ShapeEnv()
    s0 = env.create_symbol(5, "L['x'].size()[0]")
    x0 = sympy.Symbol("x0", integer=True, nonnegative=True)
    with size_context(env):
        assert _py(s0) == str(s0)  # a symbol stays
        assert "v" not in _py(4 * s0 + 2) and "s0" in _py(4 * s0 + 2)  # a sum of products stays
        text = _py(FloorDiv(7 * s0 - 1, s0))
        assert text.startswith("v"), text  # computed by the wrapper
        assert "v" in _py(x0 * FloorDiv(7 * s0 - 1, s0)) and "x0" in _py(x0 * FloorDiv(7 * s0 - 1, s0))
