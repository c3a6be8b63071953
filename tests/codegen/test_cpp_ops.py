"""C++ generation of the masked and indirect-indexing ops (the text; running them is tested in tests/lower)."""
import torch

from kiln.codegen.cpp.ops import CppOps


class Ctx:
    checks_bounds = False

    def __init__(self):
        self.indirect_nonempty = {}

    def pointer(self, name):
        return f"ptr_{name}"

    def dtype_of(self, name):
        return {"x": torch.float32, "idx": torch.int64}[name]

    def local_index(self, name, index):
        return index

    def rename(self, expr):
        return expr


def test_masked_body_is_a_lambda_called_only_under_the_mask():
    from kiln.loopir.index import var

    ops = CppOps(Ctx())
    x0 = var("x", 0)
    j = ops.index_expr(x0, torch.int64)
    mask = ops.ge(j, ops.constant(2, torch.int64))
    out = ops.masked(mask, lambda: ops.exp(ops.load("x", x0 - 2)), 0.0)
    text = "\n".join(ops.lines)
    assert "[&]() -> float {" in text and "ptr_x[(x0 - 2)]" in text, text
    assert f"{mask} ? " in text and "() : static_cast<float>(0x0.0p+0)" in text, text
    # the load inside the lambda is not reused outside it
    again = ops.load("x", x0 - 2)
    assert again.name != out.name and sum("ptr_x[(x0 - 2)]" in line for line in ops.lines) == 2


def test_indirect_indexing_is_checked_and_flags_the_kernel():
    from kiln.loopir.index import var

    ctx = Ctx()
    ops = CppOps(ctx)
    v = ops.load("idx", var("x", 0))
    k = ops.indirect_indexing(v, 7)
    ops.load("x", 3 * k + 1)
    text = "\n".join(ops.lines)
    assert f"kiln_indirect(static_cast<int64_t>({v.name}), 7LL, true)" in text, text
    assert f"ptr_x[(1 + 3*{k.name})]" in text or f"ptr_x[(3*{k.name} + 1)]" in text, text
    assert ctx.checks_bounds


def test_masked_16_bit_value_and_float_fill_compile():
    # ``mask ? bf16 : -inf`` had two types for ?: and g++ refused it: bf16 max pooling ran with ATen
    from tests.lower.helpers import check

    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(2, 3, 9, 9).to(dtype)
        check(lambda v: torch.nn.functional.max_pool2d(v, 3, 2, 1), x)
        check(lambda v: torch.nn.functional.pad(v, (1, 2), value=-2.5), x)


def test_bool_loads_read_bytes_so_masked_loops_vectorize():
    """GCC 12 left a loop scalar (exp included) when it loaded through a ``bool*`` and selected floats
    with the value (a masked softmax ran 2.5x slower than eager); bytes compared with 0 vectorize."""
    from kiln.loopir.index import var

    class BoolCtx(Ctx):
        def dtype_of(self, name):
            return {"m": torch.bool, "x": torch.float32}[name]

    ops = CppOps(BoolCtx())
    x0 = var("x", 0)
    ops.where(ops.load("m", x0), ops.constant(float("-inf"), torch.float32), ops.load("x", x0))
    text = "\n".join(ops.lines)
    assert "(reinterpret_cast<const uint8_t*>(ptr_m)[x0] != 0)" in text, text


def test_masked_softmax_with_a_bool_mask_equals_eager():
    from tests.lower.helpers import check

    x, mask = torch.randn(3, 37, 37), torch.rand(37, 37) > 0.4
    mask[:, 0] = False
    check(lambda s, m: torch.softmax(s.masked_fill(m, float("-inf")), -1), x, mask)
    check(lambda s, m: torch.where(m, s, 0.5).sum(-1) + m.float().sum(-1), x, mask)


def test_an_index_into_a_dimension_that_may_be_empty_guards_the_access():
    """A loaded index into a dimension of size 0 (static, or an unbacked size) has no valid element: the
    load and the store through it only happen where the dimension is non-empty."""
    import sympy
    from kiln.loopir.index import var

    ops = CppOps(Ctx())
    v = ops.load("idx", var("x", 0))
    u0 = sympy.Symbol("u0", integer=True, nonnegative=True)
    k = ops.indirect_indexing(v, u0)
    got = ops.load("x", k)
    ops.store("x", k, got)
    text = "\n".join(ops.lines)
    nonempty = "(static_cast<int64_t>(u0) > 0)"
    assert f"({nonempty} ? ptr_x[{k}] : static_cast<float>(0))" in text, text
    assert f"if ({nonempty}) ptr_x[{k}] = " in text, text
    ops = CppOps(Ctx())  # a size known positive: nothing added
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    k = ops.indirect_indexing(ops.load("idx", var("x", 0)), s0)
    ops.load("x", k)
    assert "> 0)" not in "\n".join(ops.lines)
