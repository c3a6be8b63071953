"""Device functions that generated Triton kernels call as ``kh.<name>`` (kiln helpers).

The runtime executes this file's source once per target with ``jit`` and ``libdevice`` bound for
that target: ``triton.jit`` and CUDA libdevice for compiled GPU code, Triton's interpreter and
``interp_libdevice`` for CPU tensors. Imported as a plain module it binds the GPU ones.

Semantics follow ATen (and ``codegen/cpp/prelude.h``): max/min propagate NaN, argmax/argmin pick
the first index of the extreme value and treat NaN as the extreme, integer division by zero gives 0.
"""
import triton
import triton.language as tl

if "jit" not in globals():
    jit = triton.jit
if "libdevice" not in globals():
    from triton.language.extra import libdevice


# ------------------------------------------------------------------------------ NaN-aware max/min

@jit
def maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)


@jit
def minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@jit
def fmax(a, b):
    return tl.where((a > b) | (b != b), a, b)


@jit
def fmin(a, b):
    return tl.where((a < b) | (b != b), a, b)


@jit
def add(a, b):
    return a + b


@jit
def mul(a, b):
    return a * b


@jit
def logical_or(a, b):
    return a | b


@jit
def logical_and(a, b):
    return a & b


@jit
def argmax_combine(a, ia, b, ib):
    """(value, index) pairs: the larger value; NaN counts as largest; ties keep the smaller index."""
    a_nan = a != a
    b_nan = b != b
    pick_a = (a > b) | (a_nan & ~b_nan) | ((a == b) & (ia < ib)) | (a_nan & b_nan & (ia < ib))
    return tl.where(pick_a, a, b), tl.where(pick_a, ia, ib)


@jit
def argmin_combine(a, ia, b, ib):
    a_nan = a != a
    b_nan = b != b
    pick_a = (a < b) | (a_nan & ~b_nan) | ((a == b) & (ia < ib)) | (a_nan & b_nan & (ia < ib))
    return tl.where(pick_a, a, b), tl.where(pick_a, ia, ib)


# -------------------------------------------------------------------------------- integer division

@jit
def floordiv_int(a, b):
    safe = tl.where(b == 0, 1, b)
    q = a // safe  # truncates toward zero
    r = a - q * safe
    q = tl.where((r != 0) & ((r < 0) != (safe < 0)), q - 1, q)
    return tl.where(b == 0, 0, q)


@jit
def truncdiv_int(a, b):
    safe = tl.where(b == 0, 1, b)
    return tl.where(b == 0, 0, a // safe)


@jit
def mod_int(a, b):
    safe = tl.where(b == 0, 1, b)
    r = a - (a // safe) * safe
    r = tl.where((r != 0) & ((r < 0) != (safe < 0)), r + safe, r)
    return tl.where(b == 0, 0, r)


@jit
def fmod_int(a, b):
    safe = tl.where(b == 0, 1, b)
    return tl.where(b == 0, 0, a - (a // safe) * safe)


@jit
def pow_int(a, b):
    result = a * 0 + 1
    base = a
    e = b
    for _ in range(64):
        result = tl.where((e & 1) != 0, result * base, result)
        base = base * base
        e = tl.where(e > 0, e >> 1, e)
    neg = tl.where(a == 1, 1, tl.where(a == -1, tl.where((b & 1) != 0, -1, 1), 0))
    return tl.where(b < 0, neg.to(a.dtype), result)


@jit
def lshift(a, b, BITS: tl.constexpr):
    ok = (b >= 0) & (b < BITS)
    return tl.where(ok, a << tl.where(ok, b, 0), 0)


@jit
def rshift(a, b, BITS: tl.constexpr):
    ok = (b >= 0) & (b < BITS)
    return tl.where(ok, a >> tl.where(ok, b, 0), tl.where(a < 0, -1, 0))


# ---------------------------------------------------------------------------------- float division

@jit
def floordiv_float(a, b):
    mod = libdevice.fmod(a, b)
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)
    fl = tl.floor(div)
    fl = tl.where(div - fl > 0.5, fl + 1.0, fl)
    q = tl.where(div != 0, fl, libdevice.copysign(div * 0.0, a / b))
    return tl.where(b == 0, a / b, q)


@jit
def mod_float(a, b):
    m = libdevice.fmod(a, b)
    return tl.where((m != 0) & ((b < 0) != (m < 0)), m + b, m)


@jit
def to_bfloat16(x):
    return x.to(tl.bfloat16)  # round to nearest even (the interpreter's own cast truncates: replaced there)


@jit
def dot_operand(x):
    return x  # a tl.dot operand as it is (the interpreter's dot multiplies bfloat16 bit patterns: replaced there)


@jit
def sigmoid(a):
    return 1.0 / (1.0 + tl.exp(-a))


@jit
def sign(a):
    return (a > 0).to(a.dtype) - (a < 0).to(a.dtype)


# ------------------------------------------------------------------------------ scans (codegen/triton/scan.py)

@jit
def cummax_value(a, b):
    """ATen's cummax step, ``b`` the later element: it wins when NaN, or when ``a`` is not and b >= a."""
    return tl.where((b != b) | ((a == a) & (b >= a)), b, a)


@jit
def cummin_value(a, b):
    return tl.where((b != b) | ((a == a) & (b <= a)), b, a)


@jit
def cummax_combine(a, ia, b, ib):
    """(value, index) pairs of cummax: the later pair wins on ties (ATen: the last index), NaN sticks."""
    take_b = (b != b) | ((a == a) & (b >= a))
    return tl.where(take_b, b, a), tl.where(take_b, ib, ia)


@jit
def cummin_combine(a, ia, b, ib):
    take_b = (b != b) | ((a == a) & (b <= a))
    return tl.where(take_b, b, a), tl.where(take_b, ib, ia)


@jit
def log_add_exp(a, b):
    """logcumsumexp's combine (ATen's _log_add_exp_helper): equal infinities stay, NaN propagates."""
    mn = tl.where(a < b, a, b)
    mx = tl.where(a < b, b, a)
    finite = (mn != mx) | (tl.abs(mn) < float("inf"))
    out = tl.where(finite, libdevice.log1p(tl.exp(mn - mx)) + mx, a)
    return tl.where((a != a) | (b != b), a + b, out)


# ------------------------------------------------------------------------------ index checks

@jit
def check_index(ok):
    """Stops the kernel (a device-side assert, as ATen's CUDA indexing kernels) where ``ok`` is false:
    a loaded index out of bounds. Kernels that call it are compiled with ``debug=True`` (Triton drops
    device asserts otherwise) and ``sanitize_overflow=False`` (no checks on other integer math). Under
    Triton's interpreter ``interp_libdevice.check_index`` replaces it: it sets a flag that the graph's
    wrapper reads after the launch and turns into an ``IndexOutOfBoundsError``, as for C++ kernels."""
    tl.device_assert(ok, "kiln: an index tensor holds a value outside the dimension it indexes "
                         "(eager PyTorch raises too); check the index values")
