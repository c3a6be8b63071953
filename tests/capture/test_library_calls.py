"""Calls into libraries kiln does not trace into (skipfiles): they break the graph at the call and run as
Python, so their internals can never turn into a wrong result."""
import os
import subprocess
import sys
import textwrap

import pytest

from kiln.capture import skipfiles

_USER_TRITON_KERNEL = textwrap.dedent('''
    import torch, triton, triton.language as tl, kiln

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    def f(x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
        return out.relu() * 2

    x, y = torch.randn(100), torch.randn(100)
    compiled = kiln.compile(f, backend="eager")
    for _ in range(3):
        torch.testing.assert_close(compiled(x, y), f(x, y))
    stats = kiln.stats.snapshot()
    assert stats["graphs"] == 1 and not stats["graph_breaks"], stats  # the launch is a node of the graph
    print("OK", stats["graphs"])
''')


def test_triton_package_is_not_traced_into():
    triton = pytest.importorskip("triton")
    assert skipfiles.is_skipped_file(triton.runtime.jit.__file__)
    assert not skipfiles.is_inlinable(triton.runtime.jit.JITFunction.__getitem__.__code__)


def test_user_triton_kernel_launch_gives_eager_result():
    """A user @triton.jit kernel launched in compiled code (Triton's interpreter on CPU) writes the tensor the
    graph reads afterwards; kiln once traced into Triton's launcher and returned garbage. The launch is now
    one node of one graph (tests/user_kernels/ has the rest)."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", _USER_TRITON_KERNEL], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK" in done.stdout


def test_exit_stack_value_unwinds_last_first_once_and_refuses_to_be_rebuilt_half_used():
    import types

    from kiln.capture.values.base import ConstantValue
    from kiln.capture.values.exit_stacks import ExitStackValue
    from kiln.errors import Unsupported

    calls = []

    class Recorder:
        def is_constant(self):
            return False

        def call(self, tx, args, kwargs):
            calls.append(tuple(a.as_constant() for a in args))
            return ConstantValue(None)

    tx = types.SimpleNamespace(output=types.SimpleNamespace(generator_floor=None))
    stack = ExitStackValue()
    fn = Recorder()
    assert stack.call_method(tx, "callback", [fn, ConstantValue(1)], {}) is fn  # returns the callback
    stack.call_method(tx, "callback", [fn, ConstantValue(2)], {})
    with pytest.raises(Unsupported):
        stack.reconstruct(None)  # callbacks registered: an empty ExitStack() would lose them
    stack.call_method(tx, "close", [], {})
    stack.call_method(tx, "close", [], {})
    assert calls == [(2,), (1,)]
    with pytest.raises(Unsupported):
        stack.call_method(tx, "pop_all", [], {})


def test_opaque_object_attribute_reads_deferred_only_where_they_cannot_run_code():
    import types

    import numpy as np

    from kiln.capture.guards import GuardSet
    from kiln.capture.side_effects import SideEffects
    from kiln.capture.sources import LocalSource
    from kiln.capture.values.builder import OpaqueAttrValue, OpaqueObjectValue
    from kiln.errors import Unsupported

    tx = types.SimpleNamespace(output=types.SimpleNamespace(guards=GuardSet(), side_effects=SideEffects()))
    rng = OpaqueObjectValue(np.random.default_rng(0), LocalSource("rng"))
    assert isinstance(rng.getattr(tx, "standard_normal"), OpaqueAttrValue)  # a method: binding runs nothing
    with pytest.raises(Unsupported):
        rng.getattr(tx, "bit_generator")  # a C property: read as Python at the break
    with pytest.raises(Unsupported):
        OpaqueObjectValue(object(), LocalSource("o")).getattr(tx, "missing")  # AttributeError, where eager raises it
