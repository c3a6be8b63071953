"""Backend "kiln" (the default): capture -> ATen tracing and decompositions -> lowering to loop IR ->
scheduling and fusion -> generated C++/OpenMP kernels and a Python wrapper.

CUDA tensors get Triton kernels; CPU tensors get C++ kernels, or Triton kernels run by Triton's
interpreter with ``cpu_codegen="triton"``. Graphs kiln cannot generate code for yet run through the
``aot_eager`` path (ATen kernels), and ``explain`` says why: inputs on several devices, or
graph inputs that are not tensors.

Training (grad mode on, something requires grad) goes through ``aot_compile``: the joint graph is
partitioned and the forward and backward graphs each get generated code. A single graph kiln cannot
generate code for runs op by op with ATen kernels; the rest of the region keeps its kernels.
"""
from __future__ import annotations

import os
import warnings

import torch

from kiln.aot.compile import aot_compile
from kiln.aot.channels_last import use_channels_last
from kiln.aot.graph import format_graph
from kiln.aot.joint import JointUnsupported
from kiln.aot.symbols import shape_env_of
from kiln.backends.choose_faster import race
from kiln.backends import step_graphs
from kiln.backends.default_graphs import graph_candidate
from kiln.backends.aot_eager import captured_graph_runs_eagerly, compile_aot_eager, explain_aten_graph, run_graph_module
from kiln.backends.registry import register_backend
from kiln.backends.warm_cache import WarmStart
from kiln.codegen.cpp.build import load_library
from kiln.codegen.cudagraphs import CudaGraphRunner
from kiln.codegen.triton.precompile import batched, wait_for_prewarm, warm_pool
from kiln.codegen.triton.runtime import triton_available
from kiln.codegen.wrapper_runtime import INPLACE_FLAG, tensor_call
from kiln.debug.stats import stats, time_first_call
from kiln.errors import KernelBuildError
from kiln.fake import UnsupportedFakeOp
from kiln.fake.symbolic import is_symbolic
from kiln.options import Options, default_options

# Lowering, scheduling and code generation (and sympy with them) are imported by the functions that
# compile: a graph loaded from the warm cache imports none of them (kiln/lazy.py).

PRELUDE = os.path.join(os.path.dirname(__file__), "..", "codegen", "cpp", "prelude.h")


class CompiledGraph:
    """Everything generated for one graph: printable, and callable through ``AtenRuntime``."""

    def __init__(self, gm, lg, sched, kernels, wrapper, library_source, target="cpp"):
        self.gm, self.lg, self.sched, self.kernels, self.wrapper = gm, lg, sched, kernels, wrapper
        self.source = library_source
        self.target = target  # "cpp", "triton" (GPU) or "triton-interpreted" (CPU tensors)
        self.cudagraphs = None  # the CudaGraphRunner with mode="reduce-overhead" on the GPU
        self.dynamic = False  # size-generic code (symbolic sizes)
        self.dynamic_note = ""  # for a graph with symbolic sizes: generic, or why it was compiled static

    def explain(self) -> str:
        from kiln.codegen.triton import build as triton_build
        from kiln.schedule.scheduler import ExternStep

        what = "C++" if self.target == "cpp" else "Triton"
        lines = [f"generated {len(self.kernels)} {what} kernel(s) ({self.target}):"]
        if self.dynamic_note:
            lines.append(f"dynamic shapes: {self.dynamic_note}")
        if self.target == "cpp":
            lines += [f"  {k.name}: fuses {len(k.origins)} op(s)" for k in self.kernels.values()]
        else:
            lines += triton_build.describe_kernels(self.kernels)
        externs = [s for s in self.sched.steps if isinstance(s, ExternStep)]
        if externs:
            lines.append(f"ops run by ATen kernels ({len(externs)}):")
            for s in externs:
                lines.append(f"  {s.node.node.op}: {s.node.node.reason}")
        if self.cudagraphs is not None:
            lines.append(self.cudagraphs.explain())
        from kiln.codegen.locations import resolve_locations

        lines += ["", "wrapper:", resolve_locations(self.wrapper.source, self.wrapper.locations)]
        return "\n".join(lines)


def _prelude() -> str:
    with open(PRELUDE) as f:
        return f.read()


def compile_graph(gm, options: Options, target: str = "cpp") -> CompiledGraph:
    """Lower, schedule and generate code for a core-op ATen graph module; ``target`` is "cpp",
    "triton" (GPU) or "triton-interpreted" (Triton kernels on CPU tensors, run by Triton's interpreter).

    A graph with symbolic sizes (``gm.meta["kiln_shape_env"]``) is compiled once into size-generic code
    (kernels take the size symbols as arguments, the wrapper reads them from the inputs). Where that
    fails for any reason, every size symbol is specialized (``env.specialize_all()``: the guards then
    check each size) and the graph is compiled for the sizes seen; the reason goes to
    ``stats.dynamic_fallbacks`` and the graph's explain text."""
    from kiln.loopir.sizes import size_context

    env = gm.meta.get("kiln_shape_env")
    if env is None or not (_has_symbolic_inputs(gm) or getattr(env, "unbacked", None)):
        return _compile_graph(gm, options, target)
    if _all_specialized(env):
        with size_context(env, concrete=True):
            return _compile_graph(gm, options, target)
    try:
        with size_context(env):
            cg = _compile_graph(gm, options, target)
            cg.wrapper.check_symbols()
    except Exception as exc:  # noqa: BLE001 -- any failure of the size-generic path: compile static (sound)
        if os.environ.get("KILN_DYNAMIC_STRICT") == "1":  # debugging: see where size-generic code fails
            raise
        where = _where(exc)
        reason = f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"[:300]
        stats.dynamic_fallbacks[reason + where] += 1
        env.specialize_all()
        with size_context(env, concrete=True):
            cg = _compile_graph(gm, options, target)
        cg.dynamic_note = f"compiled for the sizes seen (size-generic code failed: {reason}{where})"
        return cg
    stats.dynamic_graphs += 1
    cg.dynamic = True
    cg.dynamic_note = f"size-generic code over {', '.join(sorted(map(str, cg.wrapper.symbols)))}"
    return cg


def _has_symbolic_inputs(gm) -> bool:
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder" and isinstance(val, torch.SymInt) and is_symbolic(val):
            return True  # an int argument traced as a symbol (Options.dynamic_ints)
        if node.op == "placeholder" and isinstance(val, torch.Tensor):
            if any(is_symbolic(s) for s in (*val.shape, *val.stride())):
                return True
    return False


def _all_specialized(env) -> bool:
    """True when every size symbol of ``env`` is guarded to its hint (nothing left to be generic over)."""
    import sympy

    if getattr(env, "unbacked", None):
        return False  # (unbacked sizes stay symbols: there is no value to specialize them to)
    facts = {g.fact for g in env.guards}
    return all(sympy.Eq(s, h) in facts for s, h in env.hints.items())


def _where(exc: BaseException) -> str:
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/kiln/" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" at {os.path.relpath(f.filename, os.path.dirname(os.path.dirname(__file__)))}:{f.lineno}"


def _compile_graph(gm, options: Options, target: str) -> CompiledGraph:
    from kiln.codegen.cpp.kernel import generate_kernel
    from kiln.codegen.triton import build as triton_build
    from kiln.codegen.wrapper import WrapperGen
    from kiln.lower.graph import lower_graph
    from kiln.lower.registry import Unlowerable
    from kiln.schedule.inplace import plan_inplace_stores
    from kiln.schedule.scheduler import schedule
    from kiln.schedule.templates import fuse_matmul_templates, template_steps

    with stats.timed("lower"):
        lg = lower_graph(gm, options.gemm_padding, codegen=target)
    buffers = lg.buffers()
    device = "cuda" if target == "triton" else "cpu"
    elsewhere = sorted({str(b.device) for b in buffers.values() if b.device.type != device})
    if elsewhere:  # e.g. torch.full_like(x, 1, device="cuda") from CPU inputs: kernels cannot reach it
        raise Unlowerable(f"the graph makes tensors on {', '.join(elsewhere)} while its kernels run on {device}")
    output_names = {o.buffer.name for o in lg.outputs if hasattr(o, "buffer")}
    triton = target != "cpp"
    can_fuse = triton_build.can_fuse(options) if triton else None
    with stats.timed("schedule"):
        sched = schedule(lg.nodes, buffers, output_names, fuse=options.fusion, can_fuse=can_fuse)
        if triton and options.matmul_templates:
            sched = fuse_matmul_templates(sched, buffers, output_names)
    mutated = gm.meta.get("kiln_mutated_inputs", ())
    unguarded = bool(gm.meta.get("kiln_inputs_from_forward"))
    inplace = plan_inplace_stores(lg, sched, buffers, list(mutated)) if mutated and options.inplace_stores else {}
    stats.inplace_stores += len(inplace)
    with stats.timed("codegen"):
        if triton:
            kernels = triton_build.generate_kernels(sched.groups(), buffers, options)
            kernels.update(triton_build.generate_templates(template_steps(sched), buffers, options, len(kernels),
                                                           interpret=target == "triton-interpreted"))
        else:
            kernels = {}
            for i, step in enumerate(sched.groups()):
                k = generate_kernel(step, buffers, i)
                step.name = k.name
                kernels[k.name] = k
    with stats.timed("kernel_load"):
        if triton:
            source = triton_build.load_kernels(kernels, buffers, options, interpret=target == "triton-interpreted")
        else:
            source = _load_cpp(kernels, options)
    with stats.timed("codegen"):
        # on the GPU a kernel builds at its first launch, and a failed build sends the graph to ATen
        # kernels (GpuBuildCheck): the first call stores nothing into the inputs (enable_inplace_stores)
        at_once = target != "triton"
        if triton:
            from kiln.codegen.triton.launch import refresh_launch_hooks

            wrapper = WrapperGen(lg, sched, kernels, buffers, kernel_call=tensor_call, prologue=refresh_launch_hooks,
                                 inplace=inplace, inplace_at_once=at_once, unguarded_inputs=unguarded).generate()
        else:
            wrapper = WrapperGen(lg, sched, kernels, buffers, inplace=inplace, inplace_at_once=at_once,
                                 unguarded_inputs=unguarded).generate()
    stats.kernels_generated += len(kernels)
    for op, reason in lg.fallbacks.items():
        stats.aten_fallbacks[f"{op}: {reason}"] += 1
    cg = CompiledGraph(gm, lg, sched, kernels, wrapper, source, target)
    _dump(cg, options)
    if target == "triton-interpreted" and options.triton_check_arch:
        _check_gpu_build(cg, options)
    return cg


def _check_gpu_build(cg, options) -> None:
    """``Options.triton_check_arch``: the interpreted kernels must also build for that GPU (every kernel
    is built with its first launch config; all that fail are named)."""
    from kiln.codegen.triton import offline

    missing = offline.toolchain_missing(options.triton_check_arch)
    if missing:
        raise RuntimeError(f"kiln: KILN_TRITON_CHECK_ARCH={options.triton_check_arch} needs Triton's NVIDIA "
                           f"compiler on this machine: {missing}. Unset it, or install a Triton with its NVIDIA backend.")
    with stats.timed("kernel_build"):
        errors = {name: e for name, e in offline.compile_for_gpu(cg, options.triton_check_arch, options).items() if e}
    if errors:
        listed = "; ".join(f"{name}: {error}" for name, error in errors.items())
        raise RuntimeError(f"kiln: {len(errors)} Triton kernel(s) do not build for sm_{options.triton_check_arch} "
                           f"(KILN_TRITON_CHECK_ARCH): {listed}")


def _load_cpp(kernels: dict, options: Options) -> str:
    source = _prelude() + "\n\n" + "\n\n".join(k.source for k in kernels.values()) + "\n"
    if kernels:
        lib = load_library(source, options)
        import ctypes

        for k in kernels.values():
            fn = getattr(lib, k.name)
            fn.argtypes = [ctypes.c_void_p] * len(k.params) + [ctypes.c_int64] * len(k.size_args)
            fn.restype = None
            k.fn = fn
        lib.kiln_take_error.restype = ctypes.c_int
        for k in kernels.values():
            k.take_error = lib.kiln_take_error
    return source


def _dump(cg: CompiledGraph, options: Options) -> None:
    if not options.debug_dir:
        return
    os.makedirs(options.debug_dir, exist_ok=True)
    n = len([f for f in os.listdir(options.debug_dir) if f.startswith("graph_") and f.endswith("_wrapper.py")])
    base = os.path.join(options.debug_dir, f"graph_{n}")
    for suffix, text in (("_aten.txt", format_graph(cg.gm.graph)), ("_loopir.txt", cg.lg.format()),
                         ("_schedule.txt", cg.sched.format()),
                         ("_kernels.cpp" if cg.target == "cpp" else "_kernels.py", cg.source),
                         ("_wrapper.py", cg.wrapper.source)):
        with open(base + suffix, "w") as f:
            f.write(text)


def codegen_target(example_inputs, options: Options, gm=None) -> tuple[str | None, str | None]:
    """(target, None) with the code generator for these inputs, or (None, why kiln cannot generate code).

    A graph without tensor inputs (``torch.zeros(3, device="cuda")``) runs on the device of the
    tensors it makes."""
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    if not tensors and gm is not None:
        tensors = [v for node in gm.graph.nodes
                   if isinstance(v := node.meta.get("example_value", node.meta.get("val")), torch.Tensor)]
        tensors += [v for node in gm.graph.nodes if node.op == "get_attr"
                    and isinstance(v := getattr(gm, node.target, None), torch.Tensor)]
    devices = {t.device.type for t in tensors}
    if len(devices) > 1:
        return None, f"inputs on several device types ({', '.join(sorted(devices))}) run through ATen kernels"
    device = devices.pop() if devices else "cpu"
    if device == "cuda":
        target = "triton"
    elif device == "cpu":
        target = "triton-interpreted" if options.cpu_codegen == "triton" else "cpp"
    else:
        return None, f"{device} tensors run through ATen kernels (kiln generates code for cpu and cuda)"
    if target != "cpp":
        missing = triton_available()
        if missing:
            return None, f"Triton code generation needs triton: {missing}"
    return target, None


class GraphCompiler:
    """The ``(gm, example_inputs) -> callable`` that ``aot_compile`` hands each ATen graph to.

    It generates code when it can; otherwise that graph runs op by op with ATen kernels, and the
    reason is kept for ``explain``.
    """

    def __init__(self, options: Options, target: str, shape_env=None):
        self.options, self.target = options, target
        self.shape_env = shape_env  # the captured graph's ShapeEnv: its ATen graphs use the same symbols
        self.compiled: list[tuple[str, CompiledGraph | None, str]] = []  # (role, graph, why not)

    def role(self, role: str):
        return lambda gm, example_inputs: self(gm, example_inputs, role)

    def __call__(self, gm, example_inputs, role: str = "graph"):
        from kiln.lower.registry import Unlowerable

        target = self.target
        role = gm.meta.get("kiln_role", role)  # (a backward variant names itself: aot/compile.py)
        if role.startswith("backward"):  # its inputs come from the forward's code, not through guards
            gm.meta["kiln_inputs_from_forward"] = True
        devices = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
        devices |= {v.device.type for n in gm.graph.nodes if isinstance(v := n.meta.get("val"), torch.Tensor)}
        if devices == {"cuda"} and target != "triton" and triton_available() is None:
            target = "triton"  # everything is on the GPU, though the captured graph had no tensor inputs
        if self.shape_env is not None:
            gm.meta.setdefault("kiln_shape_env", self.shape_env)
        try:
            cg = compile_graph(gm, self.options, target)
        except Unlowerable as exc:
            reason = f"could not lower the graph: {exc.reason}"
        except NotImplementedError as exc:
            reason = f"{target} code generation does not cover this graph: {exc}"
        except KernelBuildError as exc:
            warnings.warn(f"{exc}\nkiln runs this graph with ATen kernels instead.", stacklevel=2)
            reason = "kernel build failed (warned)"
        else:
            self.compiled.append((role, cg, ""))
            return cg.wrapper.compile()
        stats.aten_fallbacks[f"whole graph: {reason}"] += 1
        self.compiled.append((role, None, reason))
        return run_graph_module(gm, example_inputs)

    def explain(self) -> str:
        lines = []
        for role, cg, reason in self.compiled:
            lines.append(f"-- {role} graph --")
            lines.append(cg.explain() if cg is not None else f"ran with ATen kernels: {reason}")
        return "\n".join(lines)


class GpuBuildCheck:
    """A graph's first call on the GPU, where Triton compiles the kernels: a kernel that fails to build
    or load for this GPU (a compiler error, too many registers or too much shared memory) makes the
    graph run with ATen kernels from then on, with a warning and the reason in ``explain``. Nothing
    has been written to the caller's tensors when it fails: the wrapper computes functionally and
    ``AtenRuntime`` writes mutated inputs back only after it returns."""

    def __init__(self, runtime, gm, options):
        self.run, self.gm, self.options, self.first = runtime, gm, options, True
        self.compiled_graph, self.kiln_explain = runtime.compiled_graph, runtime.kiln_explain

    def settled(self):
        """What to call from now on: after the first call, the runtime itself (one call less per call)."""
        return self if self.first else self.run

    def __call__(self, *args):
        if not self.first:
            return self.run(*args)
        wait_for_prewarm()
        try:
            out = self.run(*args)
        except Exception as exc:
            if not _is_triton_error(exc):
                raise
            reason = f"a Triton kernel failed to build for this GPU ({type(exc).__name__}: {str(exc)[:300]})"
            warnings.warn(f"kiln: {reason}; this graph runs with ATen kernels instead.", stacklevel=2)
            stats.aten_fallbacks[f"whole graph: {reason}"] += 1
            self.run = compile_aot_eager(self.gm, list(args), self.options)
            self.compiled_graph = None
            self.kiln_explain = lambda: f"kiln ran this graph with ATen kernels: {reason}"
            out = self.run(*args)
        else:
            if not self.options.cudagraphs:
                enable_inplace_stores(self.run)
        self.first = False
        return out


    def __getattr__(self, name):
        return getattr(self.__dict__["run"], name)


def enable_inplace_stores(runtime) -> None:
    """From now on the runtime's generated wrapper stores mutated inputs' new values in place (its kernels
    have all been built; codegen/wrapper.py, schedule/inplace.py)."""
    _enable_wrapper_inplace(getattr(runtime, "run", None))


def _enable_wrapper_inplace(fn) -> None:
    namespace = getattr(fn, "__globals__", None)
    if namespace is not None and INPLACE_FLAG in namespace:
        namespace[INPLACE_FLAG] = True


class InplaceAfterFirstForward:
    """A training runtime's compiled forward on the GPU for its first call: the wrapper computes its
    first call functionally (its Triton kernels are built and loaded then), and stores mutated inputs'
    new values in place from then on (BatchNorm's running statistics), as ``GpuBuildCheck`` does for
    inference graphs. It then hands the runtime the wrapper itself: later calls pay nothing."""

    def __init__(self, runtime, fwd):
        self.fwd = fwd
        # what becomes of the wrapper after the first call (``step_graphs.ReplayRace`` takes it over)
        self.settle = lambda fn: setattr(runtime, "fwd", fn)

    def __call__(self, *args):
        out = self.fwd(*args)
        _enable_wrapper_inplace(self.fwd)
        self.settle(self.fwd)
        return out


def gpu_training_runtime(runtime, gm, options, target: str) -> None:
    """For a training runtime whose forward was generated for the GPU (``inplace_at_once`` off); then,
    where its graphs are candidates, CUDA-graph replay of its forward and backward
    (``backends/step_graphs.py``)."""
    from kiln.aot.training import TrainingRuntime

    if target != "triton" or not isinstance(runtime, TrainingRuntime):
        return
    if not options.cudagraphs:
        runtime.fwd = InplaceAfterFirstForward(runtime, runtime.fwd)
    step_graphs.install(runtime, gm, options)
    inner = getattr(runtime, "kiln_explain", lambda: "")
    runtime.kiln_explain = lambda: inner() + "\n" + step_graphs.explain(runtime)


def _is_triton_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("triton") or str(exc).startswith("Triton Error")


def _wants_channels_last(options, example_inputs) -> bool:
    """``Options.conv_channels_last``; unset, on for graphs on CUDA."""
    if options.conv_channels_last is not None:
        return options.conv_channels_last
    return any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)


# code generation (kiln/lower, kiln/schedule, kiln/codegen) does not take symbolic sizes yet: a dynamic
# graph is compiled for the sizes seen. Set to True (and drop specialize_for_codegen) once it does.
CODEGEN_SUPPORTS_SYMBOLIC_SIZES = True


def specialize_for_codegen(gm) -> None:
    """Until lowering supports size symbols, a dynamic graph's sizes become constants before tracing
    (``env.specialize_all()``: the guards then check every size); ``stats.dynamic_fallbacks`` says so."""
    if CODEGEN_SUPPORTS_SYMBOLIC_SIZES:
        return
    env = shape_env_of(gm)
    if env is not None:
        stats.dynamic_fallbacks["kiln: code generation does not take symbolic sizes yet"] += 1
        env.specialize_all()


@register_backend(name="kiln")
def kiln_backend(gm, example_inputs, options=None):
    """A dynamic graph (symbolic sizes) whose size-generic compile fails for any reason is compiled for
    the sizes seen instead (``env.specialize_all()``: the guards then check every size), with the
    reason in ``stats.dynamic_fallbacks``; never an error for the user."""
    env = shape_env_of(gm)
    if env is not None and not _all_specialized(env):
        try:
            return _kiln_backend(gm, example_inputs, options)
        except Exception as exc:  # noqa: BLE001 -- any failure: the static compile below decides
            if os.environ.get("KILN_DYNAMIC_STRICT") == "1":  # debugging: see where size-generic code fails
                raise
            stats.dynamic_fallbacks[f"kiln: {type(exc).__name__}: {str(exc)[:160]}"] += 1
            env.specialize_all()
    return _kiln_backend(gm, example_inputs, options)


def _kiln_backend(gm, example_inputs, options=None):
    options = options or default_options()
    specialize_for_codegen(gm)
    target, reason = codegen_target(example_inputs, options, gm)
    if reason is not None:
        fn = compile_aot_eager(gm, example_inputs, options)
        stats.aten_fallbacks[f"whole graph: {reason}"] += 1
        inner = getattr(fn, "kiln_explain", lambda: "")
        fn.kiln_explain = lambda: f"kiln ran this graph with ATen kernels: {reason}\n{inner()}"
        return fn
    warm = WarmStart(gm, example_inputs, options, target)
    runtime = warm.lookup()
    if runtime is not None:
        inference = getattr(runtime, "aten_graph", None) is not None
        if target == "triton" and inference:
            loaded = _gpu_runtime(runtime, gm, options)
            return race(gm, example_inputs, loaded, options, warm, graph_candidate(loaded, runtime, options))
        gpu_training_runtime(runtime, gm, options, target)
        return race(gm, example_inputs, _timed(runtime), options, warm)
    if target == "triton":
        warm_pool(options.compile_workers)  # the compile workers start while the graph is traced and lowered
    layout_note = ""
    if _wants_channels_last(options, example_inputs):
        if use_channels_last(gm):
            layout_note = ("2-D convolutions run channels-last (inputs and weights converted; "
                           "Options.conv_channels_last / KILN_CONV_CHANNELS_LAST=0 turns it off)\n")
    compiler = GraphCompiler(options, target, shape_env_of(gm))
    from kiln.decomp import decomposition_table

    table = decomposition_table()
    try:
        try:
            with _kernel_builds_batched(target):
                runtime = aot_compile(gm, example_inputs, compiler.role("forward"), compiler.role("backward"),
                                      options=options, decompositions=table)
        except JointUnsupported as exc:
            # the captured graph runs op by op under autograd (backends/aot_eager.py says why not
            # the functionalized ATen forward)
            stats.eager_fallbacks[f"kiln joint graph: {exc.reason}"] += 1
            return captured_graph_runs_eagerly(gm, f"no joint forward/backward graph: {exc.reason}")
    except UnsupportedFakeOp:
        return compile_aot_eager(gm, example_inputs, options)  # reports why and runs the FX graph
    plan = getattr(runtime, "plan", None)
    head = plan.explain if plan is not None else (lambda: explain_aten_graph(runtime.aten_graph))
    runtime.kiln_explain = lambda: head() + "\n\n" + layout_note + compiler.explain()
    graphs = [cg for _, cg, _ in compiler.compiled if cg is not None]
    runtime.compiled_graph = graphs[0] if len(compiler.compiled) == 1 and graphs else None
    runtime.compiled_graphs = graphs
    runtime.codegen_complete = bool(graphs) and len(graphs) == len(compiler.compiled)
    warm.store(runtime, compiler)
    warm.keep_variants(runtime, compiler)
    gpu_training_runtime(runtime, gm, options, target)
    if target == "triton" and plan is None and runtime.compiled_graph is not None:
        outer = _gpu_runtime(runtime, gm, options)
        return race(gm, example_inputs, outer, options, warm, graph_candidate(outer, runtime, options))
    return race(gm, example_inputs, _timed(runtime), options, warm)


def _kernel_builds_batched(target: str):
    """On the GPU, the graphs of one compile (a training graph's forward and backward) hand their new
    Triton kernels to the workers and wait for them together, at the end (``precompile.batched``)."""
    import contextlib

    return batched() if target == "triton" else contextlib.nullcontext()


def _timed(runtime):
    time_first_call(runtime)
    return runtime


def _gpu_runtime(runtime, gm, options):
    """An inference graph's runtime on the GPU: CUDA graphs (mode="reduce-overhead"), the first call
    timed, and a kernel that fails to build for this GPU sends the graph to ATen kernels."""
    if options.cudagraphs:
        runtime.run = CudaGraphRunner(runtime.run, n_state=len(runtime.aten_graph.state))
        if runtime.compiled_graph is not None:
            runtime.compiled_graph.cudagraphs = runtime.run
    time_first_call(runtime)
    return GpuBuildCheck(runtime, gm, options)
