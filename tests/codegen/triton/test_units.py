"""Unit tests of the Triton generator's stages: the ops handler, the fusion condition, the module
cache, launch configs, and the backend wiring in a fresh process."""
import os
import subprocess
import sys
import textwrap

import pytest
import sympy
import torch

from kiln.codegen.triton.launch import LaunchConfig, candidate_configs
from kiln.codegen.triton.ops import TritonOps
from kiln.codegen.triton.runtime import load_module, module_path
from kiln.debug.stats import stats
from kiln.loopir.index import var
from tests.codegen.triton.helpers import check, triton_options


class _Ctx:
    """The least a TritonOps needs: one input, 1-D pointwise indexing."""

    reduction_mode = "persistent"

    def __init__(self):
        self.n = 0

    def new_tmp(self, prefix="tmp"):
        self.n += 1
        return f"{prefix}{self.n - 1}"

    def dtype_of(self, name):
        return torch.float32

    def pointer(self, name):
        return "in_ptr0"

    def eviction(self, name):
        return None

    def register(self, name, index):
        return None

    def index(self, expr):
        expr = sympy.sympify(expr)
        return str(expr), frozenset("x" for _ in expr.free_symbols)

    def mask(self, axes):
        return "xmask" if axes else None

    def shape(self, axes):
        return "[XBLOCK]"


def test_ops_share_common_subexpressions():
    ops = TritonOps(_Ctx())
    x0 = var("x", 0)
    a = ops.load("arg", 2 * x0)
    b = ops.load("arg", 2 * x0)
    assert a is b
    e1, e2 = ops.exp(a), ops.exp(b)
    assert e1 is e2
    assert sum("tl.exp" in line for line in ops.lines) == 1
    assert ops.lines[0] == "tmp0 = tl.load(in_ptr0 + (2*x0), xmask, other=0)"


def test_ops_dtypes_and_unknown_ops():
    ops = TritonOps(_Ctx())
    x = ops.load("arg", var("x", 0))
    assert ops.lt(x, x).dtype == torch.bool
    assert ops.to_dtype(x, torch.bfloat16).name != x.name
    assert "kh.to_bfloat16" in ops.lines[-1]
    i = ops.to_dtype(x, torch.int32)
    try:
        ops.truediv(i, i)
    except NotImplementedError as exc:
        assert "truediv" in str(exc)
    else:
        raise AssertionError("integer truediv must be refused")


def test_block_reads_stay_in_registers_only_when_aligned():
    # a flipped read of a fused producer's row cannot come from its registers: two kernels
    def f(x):
        y = torch.exp(x)
        return y.sum(1), y.flip(1) * 2

    cg = check(f, torch.randn(4, 6))
    assert len(cg.kernels) >= 1


def test_module_cache_hits_in_a_warm_process(tmp_path):
    options = triton_options(cache_dir=str(tmp_path))
    source = "# kiln test module\n@jit\ndef triton_noop(XBLOCK: tl.constexpr):\n    pass\n"
    before = stats.kernel_cache_hits
    ns, path, fresh = load_module(source, options, interpret=True)
    assert fresh and os.path.exists(path) and path == module_path(source, options)
    assert path.startswith(str(tmp_path))
    from triton.runtime.interpreter import InterpretedFunction

    assert isinstance(ns["triton_noop"], InterpretedFunction)
    # a second process (simulated: the per-process table cleared) finds the file
    from kiln.codegen.triton import runtime

    runtime._LOADED.clear()
    _, _, fresh = load_module(source, options, interpret=True)
    assert not fresh and stats.kernel_cache_hits == before + 1


def test_a_module_written_by_another_process_is_built_until_one_marks_it_built(tmp_path):
    """Two ranks of a distributed job: the second finds the file the first just wrote, but the first may
    still be compiling; the second builds too (through its pool, Triton's cache takes both) until a
    process has recorded that the module's kernels were built."""
    from kiln.codegen.triton import runtime

    options = triton_options(cache_dir=str(tmp_path))
    source = "# kiln test module\n@jit\ndef triton_noop2(XBLOCK: tl.constexpr):\n    pass\n"
    _, path, fresh = load_module(source, options, interpret=False)
    assert fresh
    runtime._LOADED.clear()
    assert load_module(source, options, interpret=False)[2]  # written, not built yet
    runtime.mark_built(path)
    runtime._LOADED.clear()
    assert not load_module(source, options, interpret=False)[2]
    assert not load_module(source, options, interpret=False)[2]  # (loaded in this process)


def test_launch_heuristics():
    class K:
        style, xnumel, rnumel = "pointwise", 1000, 1

    assert candidate_configs(K)[0] == LaunchConfig(1024, 0, 4)
    assert candidate_configs(K, max_block=128)[0].XBLOCK == 128
    K.style, K.xnumel, K.rnumel = "persistent", 4096, 768
    (cfg, *_) = candidate_configs(K)
    assert cfg.RBLOCK == 1024 and cfg.XBLOCK * cfg.RBLOCK <= 4096
    K.style, K.rnumel = "looped", 100000
    assert candidate_configs(K)[0].RBLOCK == 2048
    assert LaunchConfig(1, 4096, 16) in candidate_configs(K)  # long looped rows also try longer blocks


def test_long_persistent_rows_tune_the_warp_count():
    class K:
        style, xnumel, rnumel = "persistent", 16384, 4096

    configs = candidate_configs(K)
    assert configs[0] == LaunchConfig(1, 4096, 8)
    assert {c.num_warps for c in configs if c.XBLOCK == 1} == {4, 8, 16}
    assert len(configs) == len(set(configs))
    K.xnumel = 16  # too small to time candidates
    assert candidate_configs(K) == [LaunchConfig(1, 4096, 8)]


def test_codegen_error_falls_back_to_aten(monkeypatch):
    from kiln.codegen.triton import ops as triton_ops

    monkeypatch.setitem(triton_ops._UNARY_FLOAT, "exp", None)
    import torch.fx as fx

    from kiln.backends.kiln import kiln_backend

    gm = fx.symbolic_trace(lambda x: torch.exp(x) + 1)
    fn = kiln_backend(gm, [torch.randn(3)], triton_options())
    assert getattr(fn, "compiled_graph", None) is None
    assert "triton-interpreted code generation does not cover this graph" in fn.kiln_explain()
    out = fn(torch.ones(3))
    out = out[0] if isinstance(out, (list, tuple)) else out
    torch.testing.assert_close(out, torch.exp(torch.ones(3)) + 1)


def test_fresh_process_through_kiln_compile(tmp_path):
    """KILN_CPU_CODEGEN=triton selects the generator; no TRITON_INTERPRET needed."""
    script = textwrap.dedent("""
        import torch, kiln
        def f(x, w):
            return torch.nn.functional.layer_norm(x, (x.shape[-1],), w) * torch.softmax(x, -1)
        x, w = torch.randn(4, 24), torch.randn(24)
        out = kiln.compile(f)(x, w)
        torch.testing.assert_close(out, f(x, w), atol=1e-5, rtol=1e-5)
        s = kiln.stats.snapshot()
        assert s["kernels_generated"] == 1, s
        print("OK", s["kernels_generated"])
    """)
    env = dict(os.environ, KILN_CPU_CODEGEN="triton", KILN_CACHE_DIR=str(tmp_path))
    env.pop("TRITON_INTERPRET", None)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in sys.path if p])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OK 1" in done.stdout
    assert any(name.endswith(".py") for _, _, files in os.walk(tmp_path / "triton") for name in files)


def test_gpu_build_failure_at_first_call_falls_back_to_aten():
    import torch.fx as fx
    from triton.runtime.errors import OutOfResources

    from kiln.backends.kiln import GpuBuildCheck

    class Runtime:
        compiled_graph, kiln_explain = object(), staticmethod(lambda: "kernels")

        def __init__(self, exc):
            self.exc = exc

        def __call__(self, *args):
            raise self.exc

    f = lambda x: (x * 2).sum(-1)  # noqa: E731
    gm, x = fx.symbolic_trace(f), torch.randn(3, 4)
    guarded = GpuBuildCheck(Runtime(OutOfResources(300000, 232448, "shared memory")), gm, triton_options())
    with pytest.warns(UserWarning, match="failed to build for this GPU"):
        got = guarded(x)
    torch.testing.assert_close(got if isinstance(got, torch.Tensor) else got[0], f(x))
    assert guarded.compiled_graph is None and "OutOfResources" in guarded.kiln_explain()
    again = guarded(x)
    torch.testing.assert_close(again if isinstance(again, torch.Tensor) else again[0], f(x))
    other = GpuBuildCheck(Runtime(IndexError("user error")), gm, triton_options())
    with pytest.raises(IndexError):
        other(x)


def test_fused_attention_stays_whole_on_cuda(monkeypatch):
    """On CUDA, flash/efficient attention run as library kernels (traced here with CPU standing in for
    CUDA; the CPU has no such kernels, so the graph is compiled, not run)."""
    import torch.fx as fx

    import kiln.decomp.attention as attention
    from kiln.aot import aot_trace
    from kiln.backends.kiln import compile_graph
    from kiln.decomp import decomposition_table

    monkeypatch.setattr(attention, "FUSED_ATTENTION_DEVICES", ("cpu",))
    aten = torch.ops.aten
    q = torch.randn(2, 4, 16, 32, dtype=torch.bfloat16)
    f = lambda q: aten._scaled_dot_product_flash_attention(q, q, q, is_causal=True)[0] * 2  # noqa: E731
    opts = triton_options()
    ag = aot_trace(fx.symbolic_trace(f), [q], decompositions=decomposition_table(), options=opts)
    cg = compile_graph(ag.gm, opts, "triton-interpreted")
    assert "fused attention (library kernel)" in cg.explain() and len(cg.kernels) == 1


def test_merge_loop_vars_replaces_runs_of_loops_used_as_one_position():
    from kiln.codegen.triton.kernel import merge_loop_vars

    s1 = sympy.Symbol("s1", integer=True, positive=True)
    x0, x1, x2 = (var("x", d) for d in range(3))

    class Group:
        outer = [sympy.Symbol("s0", integer=True, positive=True), s1, 50257]

    class Kctx:
        group, merged = Group(), {}
        merged_var = __import__("kiln.codegen.triton.kernel", fromlist=["KernelContext"]).KernelContext.merged_var
        merged_defs = __import__("kiln.codegen.triton.kernel", fromlist=["KernelContext"]).KernelContext.merged_defs

    k = Kctx()
    padded = merge_loop_vars(50260 * s1 * x0 + 50260 * x1 + x2, k)
    assert str(padded) == "50260*x0_1 + x2"
    assert str(merge_loop_vars(50257 * s1 * x0 + 50257 * x1 + x2, k)) == "xindex"
    assert merge_loop_vars(x0 * x1 + x2, k) == x0 * x1 + x2  # not linear: kept
    assert merge_loop_vars(3 * x0 + x1, k) == 3 * x0 + x1  # 3 is not s1: not one position
    assert k.merged_defs() == ["x0_1 = (xindex // 50257)"]
