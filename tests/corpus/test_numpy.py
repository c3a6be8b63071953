"""NumPy inside compiled functions: traced as tensor ops with NumPy's dtypes, scalars, views and
mutation (kiln/capture/values/numpy_values.py); what needs data or has no exact model breaks."""
import numpy as np
import pytest
import torch

from .harness import USE_DYNAMO, check, check_fullgraph_error, dynamo_bug


def _f64(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) / 3 - 1


def _i64(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) - 2


# ---- arithmetic and dtypes --------------------------------------------------------------------------

def test_add_mul_float64():
    def fn(a, b):
        return a + b * 2 - 1

    check(fn, _f64(2, 3), _f64(2, 3))


@dynamo_bug("int / int gives float32 (torch's default dtype), NumPy gives float64")
def test_int_true_divide_is_float64():
    def fn(a, b):
        return a / b

    check(fn, _i64(4), np.array([1, 2, 3, 4]))


@dynamo_bug("integer // 0 raises ZeroDivisionError; NumPy gives 0")
def test_int_floor_divide_and_mod_by_zero():
    def fn(a, b):
        return a // b, a % b

    check(fn, _i64(4), np.array([0, 2, -3, 0]))


def test_float32_with_python_float_stays_float32():
    def fn(a):
        return a * 2.5 + 1

    check(fn, np.ones(3, np.float32))


def test_int32_with_python_int_stays_int32():
    def fn(a):
        return a * 3 - 7

    check(fn, np.array([1, 2, 3], np.int32))


def test_int_with_python_float_is_float64():
    def fn(a):
        return a * 0.5

    check(fn, np.array([1, 2, 3], np.int16))


def test_mixed_dtype_promotion():
    def fn(a, b, c):
        return a + b, b + c, a * c

    check(fn, np.ones(3, np.float32), np.arange(3, dtype=np.int16), np.arange(3, dtype=np.uint8))


def test_bool_plus_int():
    def fn(a):
        return (a > 0) + 1, (a > 0) + (a < 2)

    check(fn, _i64(5))


def test_power_and_negative():
    def fn(a):
        return -a, a ** 2, 2.0 ** a

    check(fn, _f64(4))


def test_comparisons():
    def fn(a, b):
        return a < b, a == b, a >= 0.5

    check(fn, _f64(4), np.array([0.0, 1.0, -1.0, 5.0]))


def test_reflected_operators():
    def fn(a):
        return 1 - a, 3 / a, 2 * a

    check(fn, _f64(3) + 5)


def test_float16_arithmetic():
    def fn(a):
        return a * 2 + 1, np.sqrt(a)

    check(fn, np.array([1.0, 4.0, 9.0], np.float16))


# ---- ufuncs -----------------------------------------------------------------------------------------

def test_unary_ufuncs():
    def fn(a):
        return np.exp(a), np.sin(a), np.cos(a), np.tanh(a), np.abs(a), np.sign(a), np.floor(a), np.ceil(a)

    check(fn, _f64(2, 3))


def test_log_sqrt_of_ints_are_float64():
    def fn(a):
        return np.log(a), np.sqrt(a)

    check(fn, np.array([1, 2, 3]))


@dynamo_bug("sqrt of int8 gives float64; NumPy gives float16")
def test_sqrt_of_int8_is_float16():
    def fn(a):
        return np.sqrt(a)

    check(fn, np.array([1, 4, 9], np.int8))


def test_binary_ufuncs():
    def fn(a, b):
        return (np.add(a, b), np.subtract(a, b), np.multiply(a, b), np.divide(a, b), np.true_divide(a, b),
                np.floor_divide(a, b), np.power(a, 2), np.maximum(a, b), np.minimum(a, 0.0))

    check(fn, _f64(4), np.array([1.0, -2.0, 0.5, 3.0]))


def test_round_and_clip():
    def fn(a):
        return np.round(a, 1), np.round(a), np.clip(a, -0.5, 0.5), a.clip(0, None)

    check(fn, _f64(6))


def test_clip_int_with_float_bounds():
    def fn(a):
        return np.clip(a, 0.5, 2)

    check(fn, _i64(5))


def test_where():
    def fn(a):
        return np.where(a > 0, a, 0.0), np.where(a > 0, 1, -1)

    check(fn, _f64(5))


def test_isclose():
    def fn(a, b):
        return np.isclose(a, b), np.isclose(a, b, atol=0.5)

    check(fn, _f64(4), _f64(4) + np.array([0.0, 1e-9, 0.3, 1.0]))


# ---- reductions -------------------------------------------------------------------------------------

@dynamo_bug("full reductions come back as 0-d arrays, not NumPy scalars")
def test_sum_mean_full_are_numpy_scalars():
    def fn(a):
        return np.sum(a), np.mean(a), a.sum(), a.max(), a.min()

    check(fn, _f64(3, 4))


def test_reductions_with_axis_and_keepdims():
    def fn(a):
        return np.sum(a, axis=0), a.mean(axis=1, keepdims=True), np.max(a, axis=(0, 1)), a.min(1)

    check(fn, _f64(2, 3, 4))


@dynamo_bug("full reductions come back as 0-d arrays, not NumPy scalars")
def test_sum_of_bool_is_int64():
    def fn(a):
        return np.sum(a > 0), (a > 0).sum(axis=0)

    check(fn, _f64(3, 2))


@dynamo_bug("full reductions come back as 0-d arrays, not NumPy scalars")
def test_sum_of_int32_is_int64():
    def fn(a):
        return a.sum(), np.prod(a, axis=0)

    check(fn, np.array([[1, 2], [3, 4]], np.int32))


@dynamo_bug("full reductions come back as 0-d arrays, not NumPy scalars")
def test_mean_of_ints_is_float64():
    def fn(a):
        return a.mean(), np.mean(a, axis=0)

    check(fn, _i64(2, 3))


@dynamo_bug("full reductions come back as 0-d arrays, not NumPy scalars")
def test_std_var_ddof():
    def fn(a):
        return np.std(a), np.var(a, ddof=1), a.std(axis=0, ddof=1), np.var(a, axis=1, keepdims=True)

    check(fn, _f64(3, 4) ** 2)


@dynamo_bug("full reductions come back as 0-d arrays, not NumPy scalars")
def test_argmax_argmin():
    def fn(a):
        return np.argmax(a), a.argmin(), np.argmax(a, axis=1), a.argmin(axis=0)

    check(fn, np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 7.0]]))


@dynamo_bug("full reductions come back as 0-d arrays, not NumPy scalars")
def test_prod_and_all_any():
    def fn(a):
        return np.prod(a), (a > 0).all(), np.any(a > 1, axis=0)

    check(fn, _f64(2, 3) + 1.5)


# ---- linear algebra and joining ---------------------------------------------------------------------

def test_matmul_operator_and_dot():
    def fn(a, b):
        return a @ b, np.dot(a, b), np.matmul(a, b)

    check(fn, _f64(2, 3), _f64(3, 4))


@dynamo_bug("a 0-d matmul result comes back as a 0-d array, not a NumPy scalar")
def test_vector_dot_is_scalar():
    def fn(a, b):
        return a @ b, np.dot(a, b)

    check(fn, _f64(3), _f64(3))


def test_concatenate_stack():
    def fn(a, b):
        return (np.concatenate([a, b]), np.concatenate((a, b), axis=1), np.stack([a, b]),
                np.stack([a, b], axis=-1), np.vstack([a, b]), np.hstack([a, b]))

    check(fn, _f64(2, 3), _f64(2, 3) * 2)


def test_concatenate_promotes():
    def fn(a, b):
        return np.concatenate([a, b])

    check(fn, np.array([1, 2], np.int32), np.array([0.5], np.float32))


# ---- shapes and attributes --------------------------------------------------------------------------

def test_shape_attributes():
    def fn(a):
        return a.shape, a.ndim, a.size, a.dtype, a.itemsize, len(a), a.nbytes

    check(fn, _f64(2, 3), graphs=0)


def test_transpose_reshape_expand_squeeze():
    def fn(a):
        b = np.transpose(a)
        c = a.reshape(3, 2)
        d = np.expand_dims(a, 0)
        e = np.squeeze(d, axis=0)
        return b, c, d.shape, e, a.reshape(-1), a.T, np.broadcast_to(a[0], (4, 3))

    check(fn, _f64(2, 3))


def test_newaxis_indexing():
    def fn(a):
        return a[:, np.newaxis] * a[np.newaxis, :]

    check(fn, _f64(3))


def test_astype():
    def fn(a):
        return a.astype(np.float32), a.astype("int64"), a.astype(np.float64), a.astype(bool)

    check(fn, _f64(4))


def test_dtype_checks_in_python():
    def fn(a):
        if a.dtype == np.float32:
            return a * 2
        return a - 1

    check(fn, np.ones(3, np.float32), dynamo_graphs=0)
    check(fn, np.ones(3), dynamo_graphs=0)


def test_isinstance_ndarray():
    def fn(a):
        if isinstance(a, np.ndarray):
            return a + 1
        return a

    check(fn, _f64(3))


# ---- indexing ---------------------------------------------------------------------------------------

@dynamo_bug("a[i, j] comes back as a 0-d array, not a NumPy scalar")
def test_basic_indexing():
    def fn(a):
        return a[0], a[1, 2], a[:, 1], a[..., :2], a[1:, ::2]

    check(fn, _f64(3, 4))


def test_integer_array_indexing():
    def fn(a, idx):
        return a[idx], a[[0, 2]]

    check(fn, _f64(4, 2), np.array([3, 0, 0]))


def test_setitem_scalar_and_slice():
    def fn(a):
        b = a.copy()
        b[0] = 5
        b[1:, 0] = -1.5
        b[2] = b[0] * 2
        return b

    check(fn, _f64(3, 2))


def test_setitem_float_into_int_truncates():
    def fn(a):
        b = np.zeros(3, dtype=np.int64)
        b[0] = 2.7
        b[1:] = a[:2]
        return b

    check(fn, _f64(3) + 5)


def test_boolean_mask_assignment():
    def fn(a):
        b = a.copy()
        b[b < 0] = 0.0
        return b

    check(fn, _f64(6))


# ---- creation ---------------------------------------------------------------------------------------

def test_creation_functions():
    def fn(a):
        return (np.zeros(3), np.ones((2, 2), dtype=np.float32), np.full(3, 7), np.full((2,), 1.5),
                np.eye(3), np.zeros_like(a), np.ones_like(a, dtype=np.int32), a + np.arange(3))

    check(fn, _f64(3))


def test_arange_linspace():
    def fn(a):
        return np.arange(5), np.arange(1, 10, 3), np.arange(0.0, 1.0, 0.25), np.linspace(0, 1, 5) + a

    check(fn, _f64(5))


def test_array_from_list_and_asarray():
    def fn(a):
        b = np.array([1.0, 2.0, 3.0])
        c = np.asarray(a)
        return a * b, c is a, np.array([[1, 2], [3, 4]]) @ np.eye(2, dtype=np.int64), np.array(a) is a

    check(fn, _f64(3))


@dynamo_bug("NumPy scalar arithmetic comes back as a 0-d array")
def test_numpy_scalar_constructors():
    def fn(a):
        return a * np.float32(2), np.float64(3.0) + 1, a + np.int32(2)

    check(fn, np.ones(3, np.float32))


# ---- sorting ----------------------------------------------------------------------------------------

def test_sort_and_stable_argsort():
    def fn(a):
        return np.sort(a), np.sort(a, axis=0), np.argsort(a, kind="stable"), np.sort(a, axis=None)

    check(fn, np.array([[3.0, 1.0, 2.0], [0.0, 5.0, -1.0]]))


# ---- views and mutation -----------------------------------------------------------------------------

def test_inplace_on_input_writes_through():
    def fn(a):
        a += 1
        a *= 2
        return a

    check(fn, _f64(3), inputs_mutated=True)


@dynamo_bug("a.sum() comes back as a 0-d array, not a NumPy scalar")
def test_inplace_on_slice_of_input_writes_through():
    def fn(a):
        row = a[1]
        row += 10
        a[0, 0] = -5
        return a.sum()

    check(fn, _f64(2, 3), inputs_mutated=True)


def test_view_returned_is_view_of_input():
    def fn(a):
        v = a[1:]
        v[0] = 100.0
        return v

    check(fn, _f64(4), inputs_mutated=True)


def test_view_of_new_array_returned_with_base():
    def fn(a):
        b = a * 2
        c = b[1:]
        c += 1
        return b, c

    check(fn, _f64(4))


@dynamo_bug("b[0] comes back as a 0-d array, not a NumPy scalar")
def test_scalar_taken_before_write_keeps_old_value():
    def fn(a):
        b = a.copy()
        s = b[0]
        b[0] = 99.0
        return s, b

    check(fn, _f64(3))


def test_inplace_same_kind_cast():
    def fn(a, b):
        a += b
        return a

    check(fn, np.ones(3, np.float32), _f64(3), inputs_mutated=True)


def test_sort_in_place():
    def fn(a):
        a.sort()
        return a

    check(fn, np.array([3.0, 1.0, 2.0]), inputs_mutated=True)


def test_fill():
    def fn(a):
        b = np.empty_like(a)
        b.fill(3)
        return b + a

    check(fn, _f64(3))


def test_same_array_twice():
    def fn(a, b):
        a += 1
        return a + b

    x = _f64(3)
    check(fn, x, x, inputs_mutated=True)


def test_array_returned_twice_is_one_object():
    def fn(a):
        b = a + 1
        return b, b

    out = check(fn, _f64(2))
    assert out is not None


@dynamo_bug("NumPy scalar results come back as 0-d arrays")
def test_integer_scalar_type_results():
    def fn(a):
        return a[0] + 1, a.sum() * 2, np.int64(3) * a[1]

    check(fn, np.array([4, 5, 6]))


# ---- graph breaks -----------------------------------------------------------------------------------

def test_data_dependent_branch_breaks():
    def fn(a):
        b = a * 2
        if b.sum() > 0:
            return b + 1
        return b - 1

    check(fn, _f64(4), graphs=2, dynamo_graphs=2)


def test_allclose_breaks():
    def fn(a, b):
        c = a + 1
        ok = np.allclose(c, b)
        return c * 2, ok

    check(fn, _f64(3), _f64(3) + 1, graphs=2)


@dynamo_bug("np.random inside the graph draws from torch's generator: other numbers than NumPy's")
def test_random_breaks():
    def fn(a):
        np.random.seed(0)
        return a + np.random.rand(3)

    check(fn, _f64(3), graphs=1)


def test_unknown_function_breaks():
    def fn(a):
        b = a * 2
        c = np.diff(b)
        return c + 1

    check(fn, _f64(4), graphs=2, dynamo_graphs=1)


def test_boolean_mask_read_breaks():
    def fn(a):
        b = a + 1
        return b[b > 0] * 2

    check(fn, _f64(5), graphs=2)


def test_tensor_numpy_round_trip():
    def fn(x):
        a = x.numpy()
        return torch.from_numpy(np.tanh(a) * 2) + 1

    check(fn, torch.randn(4))


def test_tensor_numpy_shares_memory_with_the_tensor():
    def fn(x):
        a = x.numpy()
        a[0] = 5.0
        return x * 2, a

    check(fn, torch.randn(3), inputs_mutated=True)


def test_numpy_of_tensor_requiring_grad_breaks():
    def fn(x):
        y = x * 2
        return y.numpy()

    if USE_DYNAMO:
        pytest.skip("dynamo raises torch's RuntimeError, not a graph break")
    check_fullgraph_error(fn, torch.randn(3, requires_grad=True))


def test_from_numpy_of_argument_shares_its_memory():
    from .harness import CountingBackend, compile_fn, reset

    def fn(a):
        t = torch.from_numpy(a)
        return t, t * 2

    reset()
    a = _f64(3)
    t, doubled = compile_fn(fn, CountingBackend())(a)
    t[0] = 42.0
    assert a[0] == 42.0 and type(t) is torch.Tensor
    torch.testing.assert_close(doubled, torch.from_numpy(_f64(3) * 2))


def test_from_numpy_of_new_array_shares_memory_after_the_graph():
    from .harness import CountingBackend, compile_fn, reset

    def fn(a):
        b = a + 1
        t = torch.from_numpy(b)
        return b, t

    reset()
    counter = CountingBackend()
    b, t = compile_fn(fn, counter)(_f64(3))
    t[0] = -1.0
    assert b[0] == -1.0 and type(b) is np.ndarray and b.dtype == np.float64
    assert counter.graph_count == 1


def test_item_breaks():
    def fn(a):
        b = a * 2
        return float(b[0]) + 1.0, b

    check(fn, _f64(3), graphs=1)


def test_recompiles_on_dtype_and_shape():
    from .harness import check_recompiles

    def fn(a):
        return a * 2

    check_recompiles(fn, [(_f64(3),), (_f64(3),), (np.ones(3, np.float32),), (_f64(4),)], graphs=3)


# ---- dtype pairs end to end (every supported dtype with every other) ---------------------------------

_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.float16, np.float32, np.float64]


@pytest.mark.parametrize("left", _DTYPES, ids=lambda d: np.dtype(d).name)
@dynamo_bug("int / int gives float32 (torch's default dtype), NumPy gives float64", strict=False)
def test_dtype_pairs(left):
    def fn(a, b):
        return a + b, a * b, a / b, np.maximum(a, b), a < b, a + 1, b * 2.5

    for right in _DTYPES:
        check(fn, np.array([1, 0, 1], dtype=left), np.array([1, 1, 0], dtype=right))


# ---- more semantics -----------------------------------------------------------------------------------

G_TABLE = np.arange(4.0)


def test_global_array_read():
    def fn(a):
        return a * G_TABLE

    check(fn, _f64(4))


def test_global_array_mutated_in_place():
    from .harness import CountingBackend, compile_fn, reset

    global G_TABLE

    def fn(a):
        G_TABLE[0] += 1.0
        return a * G_TABLE

    saved = G_TABLE
    try:
        G_TABLE = np.arange(4.0)
        expected = fn(_f64(4)), G_TABLE.copy()
        G_TABLE = np.arange(4.0)
        reset()
        counter = CountingBackend()
        table = G_TABLE
        out = compile_fn(fn, counter)(_f64(4))
        assert G_TABLE is table
        np.testing.assert_array_equal(out, expected[0])
        np.testing.assert_array_equal(G_TABLE, expected[1])
        assert counter.graph_count == 1
    finally:
        G_TABLE = saved


def test_closure_array():
    table = np.array([1.0, 2.0, 3.0])

    def fn(a):
        return a + table

    check(fn, _f64(3))


def test_arrays_in_a_list_argument():
    def fn(arrays):
        return np.concatenate(arrays) * 2

    check(fn, [_f64(2), _f64(3)])


@dynamo_bug("NumPy scalar results come back as 0-d arrays")
def test_numpy_scalar_argument():
    def fn(a, s):
        return a * s, s + 1

    check(fn, _f64(3), np.float32(1.5))


def test_reshape_of_transposed_breaks_soundly():
    def fn(a):
        b = a.T.reshape(-1)
        b[0] = 100.0
        return a, b

    check(fn, _f64(2, 3), graphs=(1, 2), dynamo_graphs=(1, 2))


def test_reshape_then_write_through():
    def fn(a):
        b = a.reshape(3, 2)
        b[0, 1] = -7.0
        return a

    check(fn, _f64(2, 3), inputs_mutated=True)


def test_array_across_graph_break():
    def fn(a):
        b = a * 2
        print("")
        c = b + a
        return c, b

    check(fn, _f64(3), graphs=2)


def test_view_across_graph_break():
    def fn(a):
        v = a[1:]
        print("")
        v += 1
        return a

    check(fn, _f64(4), graphs=(1, 2), dynamo_graphs=(1, 2, 3), inputs_mutated=True)


@dynamo_bug("NumPy scalar results come back as 0-d arrays")
def test_copy_of_scalar_keeps_scalar_type():
    def fn(a):
        s = a.sum()
        return s.copy(), np.copy(s), np.asarray(s)

    check(fn, _f64(3))


def test_loop_over_rows():
    def fn(a):
        total = np.zeros(3)
        for row in a:
            total += row * row
        return total

    check(fn, _f64(4, 3))


def test_int8_overflow_wraps_like_numpy():
    def fn(a):
        return a + a, a * np.int8(3)

    check(fn, np.array([100, -100, 7], np.int8))


def test_dtype_attributes_and_finfo_free_code():
    def fn(a):
        if a.dtype.kind == "f" and a.ndim == 2:
            return a.astype(np.float32).sum(axis=1)
        return a

    check(fn, _f64(2, 2), dynamo_graphs=0)


def test_asarray_and_array_of_a_tensor():
    def fn(x):
        a = np.asarray(x)
        b = np.array(x)
        a[0] = 1.0
        return a + b, x

    check(fn, torch.zeros(3), inputs_mutated=True)


def test_numpy_method_errors_break_not_crash():
    def fn(a):
        b = a * 2
        return b.sum(axis=0, out=None), b.nonzero()

    check(fn, _f64(2, 2), graphs=1, dynamo_graphs=(0, 1))


def test_finfo_and_dtype_objects():
    def fn(a):
        eps = np.finfo(a.dtype).eps
        big = np.iinfo(np.int32).max
        return a + eps, np.dtype("float32") == a.dtype, a * 0 + big

    check(fn, np.ones(3, np.float32), dynamo_graphs=0)


def test_mask_logic_operators():
    def fn(a):
        m = (a > 0) & (a < 1)
        n = ~m | (a == 0)
        k = np.arange(4) ^ 3
        m |= a > 5
        return m, n, k, np.where(n, a, -a)

    check(fn, _f64(4))


@dynamo_bug("full reductions come back as 0-d arrays, not NumPy scalars")
def test_argmax_of_bool():
    def fn(a):
        return np.argmax(a > 0), (a > 0).argmin(axis=0)

    check(fn, _f64(2, 3))


@dynamo_bug("np.cumsum of a bool array runs torch's cumsum on bool (not implemented)")
def test_cumsum_outer_norm_square():
    def fn(a, b):
        return (np.cumsum(a), np.cumsum(a > 0, axis=0), a.cumprod(axis=1), np.outer(a[0], b),
                np.linalg.norm(a), np.linalg.norm(b), np.square(a),
                np.shape(a), np.ndim(b), np.size(a))

    check(fn, _f64(2, 3), np.array([1, 2, 3]))


class _Normalize(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mean = np.array([0.5, 1.0, -1.0], dtype=np.float32)
        self.scale = 2.0

    def forward(self, x):
        shift = torch.from_numpy(self.mean * self.scale)
        return (x - shift).relu()


def test_module_with_numpy_attribute():
    check(_Normalize(), torch.randn(2, 3))


@dynamo_bug("abs() of an ndarray comes back as a torch.Tensor")
def test_builtin_abs_and_pow():
    def fn(a, b):
        return abs(a - b), pow(a, 2), abs(a.sum())

    check(fn, _f64(3), np.ones(3))


def test_full_like():
    def fn(a):
        return np.full_like(a, 2.5), np.full_like(a, 7, dtype=np.int32)

    check(fn, _f64(2, 3))


@dynamo_bug("int tensor * NumPy float scalar gives float64 (eager: the default dtype)")
def test_tensor_with_numpy_scalars():
    def fn(x, i, b, a):
        s = np.sqrt(a.sum())
        k = a.argmax()
        return (x / s, s * x, i * s, i + k, b + k, x * np.float32(0.5), i * np.bool_(True), x > s,
                b * np.float64(2.0), x * np.int64(3))

    check(fn, torch.randn(3), torch.arange(3, dtype=torch.int32), torch.ones(3, dtype=torch.bool), _f64(4) + 2)


def test_tensor_with_numpy_scalar_float64_precision():
    def fn(x, a):
        x *= a.mean()
        return x

    check(fn, torch.randn(3, dtype=torch.float64), np.array([0.1, 0.2, 0.3]), inputs_mutated=True)
