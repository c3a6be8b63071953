"""The store analysis of user Triton kernels (capture/triton_stores.py): which pointer parameters a
kernel writes through, and when it cannot tell (then every tensor argument counts as written)."""
import pytest

from kiln.capture.triton_stores import analyse_stores, python_function

triton = pytest.importorskip("triton")
tl = triton.language


@triton.jit
def direct(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


@triton.jit
def through_locals(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ptrs = a_ptr + offs
    if BLOCK > 16:
        ptrs = b_ptr + offs
    target = ptrs
    tl.atomic_add(target, tl.load(c_ptr + offs))


@triton.jit
def keyword_pointer(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(value=tl.load(src_ptr + offs), pointer=dst_ptr + offs)


@triton.jit
def _helper(p, v):
    tl.store(p, v)


@triton.jit
def calls_a_helper(x_ptr, y_ptr):
    _helper(y_ptr, tl.load(x_ptr))


@triton.jit
def block_pointers(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    dst = tl.make_block_ptr(out_ptr, (n,), (1,), (0,), (BLOCK,), (0,))
    tl.store(dst, tl.load(x_ptr + tl.arange(0, BLOCK)))


def _tensor_params(analysis):
    return sorted(p for p in analysis.written if p.endswith("_ptr"))


def test_direct_store():
    a = analyse_stores(python_function(direct))
    assert a.unsure is None and _tensor_params(a) == ["out_ptr"]


def test_stores_through_local_variables_and_branches():
    a = analyse_stores(python_function(through_locals))
    assert a.unsure is None and _tensor_params(a) == ["a_ptr", "b_ptr"]  # c_ptr is only read


def test_pointer_given_by_keyword():
    assert _tensor_params(analyse_stores(python_function(keyword_pointer))) == ["dst_ptr"]


@pytest.mark.parametrize("kernel, why", [(calls_a_helper, "_helper()"), (block_pointers, "make_block_ptr")])
def test_unsure_kernels_write_every_parameter(kernel, why):
    a = analyse_stores(python_function(kernel))
    assert why in a.unsure
    assert set(python_function(kernel).__code__.co_varnames[:2]) <= a.written


def test_python_function_unwraps_autotune_and_heuristics():
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])(
        triton.heuristics({"BLOCK": lambda args: 16})(direct))
    assert python_function(tuned) is python_function(direct)
