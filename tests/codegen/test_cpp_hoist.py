"""Loop-invariant values of flat C++ nests computed before the innermost loop (codegen/cpp/hoist.py)."""
import torch

import kiln
from kiln.codegen.cpp.hoist import hoist_invariants


def test_row_index_of_a_gather_moves_out_of_the_inner_loop():
    body = ["// buf0", "{",
            "int64_t tmp0 = in_ptr0[x0];",
            "int64_t tmp1 = kiln_indirect(tmp0, 10LL, true);",
            "float tmp2 = in_ptr1[(8*tmp1 + x1)];",
            "float tmp3 = tmp2 * ks0;",
            "out_ptr0[(8*x0 + x1)] = tmp3;", "}"]
    hoisted, kept = hoist_invariants(body, "x1", set())
    assert hoisted == ["int64_t h1_tmp0 = in_ptr0[x0];", "int64_t h1_tmp1 = kiln_indirect(h1_tmp0, 10LL, true);"]
    assert "float tmp2 = in_ptr1[(8*h1_tmp1 + x1)];" in kept and "out_ptr0[(8*x0 + x1)] = tmp3;" in kept


def test_what_stays_in_the_loop():
    body = ["{", "float tmp0 = in_ptr2[x0];", "float tmp1 = local_buf1;", "float tmp2 = out_ptr0[x0];",
            "out_ptr0[(8*x0 + x1)] = tmp0 + tmp1;", "}"]
    hoisted, kept = hoist_invariants(body, "x1", {"in_ptr2"})  # in_ptr2 is stored in place
    assert hoisted == []
    assert hoist_invariants(["if (x1 > 0) {", "float tmp0 = in_ptr0[x0];", "}"], "x1", set()) == \
        ([], ["if (x1 > 0) {", "float tmp0 = in_ptr0[x0];", "}"])


def test_members_reusing_names_keep_their_own_values():
    body = ["// buf0", "{", "float tmp0 = in_ptr0[x0];", "out_ptr0[(4*x0 + x1)] = tmp0;", "}",
            "// buf1", "{", "float tmp0 = in_ptr1[x0];", "out_ptr1[(4*x0 + x1)] = tmp0;", "}"]
    hoisted, kept = hoist_invariants(body, "x1", set())
    assert hoisted == ["float h1_tmp0 = in_ptr0[x0];", "float h2_tmp0 = in_ptr1[x0];"]
    assert "out_ptr0[(4*x0 + x1)] = h1_tmp0;" in [k.strip() for k in kept]
    assert "out_ptr1[(4*x0 + x1)] = h2_tmp0;" in [k.strip() for k in kept]


def test_gathers_and_row_broadcasts_end_to_end():
    def fn(w, idx, b, s):
        return torch.nn.functional.embedding(idx, w) * s[:, None] + b, w.index_select(0, idx).sum(0) + s.sum()

    w, idx, b, s = torch.randn(50, 16), torch.randint(0, 50, (7,)), torch.randn(16), torch.randn(7)
    compiled = kiln.compile(fn, options=kiln.Options(choose_faster=False, warm_cache=False))
    for got, want in zip(compiled(w, idx, b, s), fn(w, idx, b, s)):
        torch.testing.assert_close(got, want)


def test_scatter_rows_keep_masked_lambdas_and_their_users_in_the_loop():
    """A ``masked`` lambda's body (loads valid only under its mask) never leaves the loop, nor does a
    value that calls the lambda (``tmp6_fn()``: a name the old temporary pattern did not see, which
    hoisted the call above the lambda's definition and the kernel failed to build)."""
    from kiln.codegen.cpp.scatter import hoist_invariants as hoist_scatter

    body = ["int64_t tmp0 = in_ptr0[x0];", "int64_t tmp1 = kiln_indirect(tmp0, 5LL, true);",
            "bool tmp4 = tmp2 >= tmp3;", "auto tmp6_fn = [&]() -> float {", "    float tmp5 = in_ptr1[7];",
            "    return tmp5;", "};", "float tmp7 = tmp4 ? tmp6_fn() : 0.0f;", "out_ptr0[tmp1] = tmp7;"]
    before, inside = hoist_scatter(body, "x0")
    assert before == ["bool tmp4 = tmp2 >= tmp3;"]
    assert inside == [line for line in body if line not in before]


def test_index_put_on_a_slice_after_an_update_builds_and_matches_eager():
    import warnings

    import torch

    import kiln

    def g(x, i):
        y = x.clone()
        y[1:, i] = 7.0
        y[0, i] += 1
        return y

    x, i = torch.randn(4, 5), torch.tensor([1, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a C++ build failure warns and falls back to ATen
        torch.testing.assert_close(kiln.compile(g, options={"warm_cache": False})(x, i), g(x, i))
