"""Op sweep: PyTorch's OpInfo database through a kiln backend and the matching torch.compile backend.

For every OpInfo that supports --dtype (float32 by default) on --device (cpu by default), each sample
input (up to --max-samples) becomes a function of its tensors, compiled by kiln and by torch.compile,
and both are compared with eager: float32 within atol=rtol=1e-4, float64 1e-7, and bfloat16 (1.6e-2)
and float16 (1e-3) with torch's own rule for compiled low precision results as well: a result further
from eager's still passes when its error against a float64 run is at most 3x eager's.

Full sweeps on the 16-core H100 host, each command well inside 9 minutes (estimates from local runs:
3.5 s of one core per op for cpu float32 kiln vs inductor, 5.4 s with --grad, 0.8 s for --grad
through aot_eager; cuda guessed at 4x the cpu time for the Triton builds). Each writes its JSON as ops
finish, stops itself after --time-limit, and running the same command again (--resume) runs only what
is missing. The report's last line ("time in ops") gives the measured seconds per op to re-plan by.
Each command (needs `expecttest`: carry its wheel if missing), with ARGS from the list below:
    python3 setup.py build_ext --inplace -q && mkdir -p /tmp/sw && KILN_CACHE_DIR=/tmp/sw/cache PYTHONUNBUFFERED=1 \
    python3 benchmarks/op_sweep.py --workers 16 --time-limit 480 --resume ARGS 2>&1; cp /tmp/sw/*.json $OUT/
ARGS:
    --json /tmp/sw/cpu_f32.json                                      # cpu float32, kiln vs inductor (~3 min)
    --device cuda --shard 0/2 --json /tmp/sw/cuda_f32_0.json         # cuda float32, kiln vs inductor (~5 min each)
    --device cuda --shard 1/2 --json /tmp/sw/cuda_f32_1.json
    --device cuda --dtype bfloat16 --shard 0/2 --json /tmp/sw/cuda_bf16_0.json   # cuda bfloat16 (~4 min each)
    --device cuda --dtype bfloat16 --shard 1/2 --json /tmp/sw/cuda_bf16_1.json
    --grad --backend aot_eager --json /tmp/sw/grad_aot.json          # training: kiln's aot_eager vs torch's (~1 min)
    --grad --json /tmp/sw/grad_kiln.json                             # training: kiln's codegen vs inductor (~4 min)
The combined report of shards, anywhere (no torch needed):
    python benchmarks/op_sweep.py --report cuda_f32_0.json,cuda_f32_1.json
--shard I/N runs every N-th op from the I-th, in OpInfo's order. With --device cuda each worker
process holds a CUDA context of its own (spawned); one whose context breaks (an illegal address, a
device-side assert) reports that op as an error and is replaced. --workers defaults to min(8, CPUs); a worker over --timeout (per op) is killed and replaced.

--backend kiln (the default): kiln's code generation (lowering to loop IR, fusion, generated C++
kernels) against torch.compile's default backend (inductor). "fallback" then means kiln ran the graph
with ATen kernels (aot_eager) because it could not trace or lower it. For ops that pass, the report
also counts how many ran entirely through generated kernels and how many needed ATen fallbacks
(extern kernels) inside the generated code, and which ops fell back most. Inductor's side of the same
run is recorded too (op_sweep_inductor.py: its extern kernels per sample, graph breaks, no graph), and
the report prints both compilers' "no fallback / with fallback / no graph" rows side by side, library
calls (BLAS, convolution, FFT, LAPACK, random, sort, attention, custom ops) sorted by one rule.
--backend aot_eager: kiln's "aot_eager" (ATen tracing, decompositions, functionalization, the core-op
graph run with eager ATen) against torch.compile(backend="aot_eager"); "fallback" means kiln ran the
graph eagerly because it could not trace it.

An op passes when all its samples match; "error" means kiln (or torch) raised where eager did not.

    python benchmarks/op_sweep.py                      # everything, min(8, CPUs) worker processes
    python benchmarks/op_sweep.py --ops add,softmax    # ops whose name contains a word
    python benchmarks/op_sweep.py --exact --ops add,nn.functional.softmin   # exactly these ops
    python benchmarks/op_sweep.py --no-torch --json sweep.json
    python benchmarks/op_sweep.py --backend aot_eager
    python benchmarks/op_sweep.py --dtype bfloat16 --shard 0/2 --json s0.json   # then 1/2 into s1.json,
    python benchmarks/op_sweep.py --report s0.json,s1.json                     # and their combined report

kiln passes only when its backend compiled at least one graph; by default torch passes whenever its
result matches, also when dynamo fell back to eager (a graph break before any op, or aot_eager failing:
narrow/tensor_split with tensor arguments, nonzero, item, ...). --strict-torch applies kiln's rule to
torch as well: the fair comparison of what each captures.
    python benchmarks/op_sweep.py --grad --ops add,softmax  # outputs and input gradients (training)

With --grad, samples require grad; each function's outputs are back-propagated with fixed random
cotangents (torch.autograd.grad), and outputs and input gradients are compared with eager. kiln must
take its training path (joint graph, partition, autograd.Function): where it falls back to running
the ATen graph under autograd, the sample counts as "fallback".

Frontends for kiln: "fx" (default) hands a one-node FX graph calling the op straight to the backend;
"kiln" goes through kiln.compile(fn, backend=...), so capture is exercised too.
Needs the ``expecttest`` package (torch's OpInfo database imports it).
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import sys
import time
import traceback

# this checkout's kiln, not whichever one is installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import op_sweep_inductor  # noqa: E402
from op_sweep_report import TORCH_BACKEND, load_reports, report, settings_of  # noqa: E402



def _op_db():
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ModuleNotFoundError as exc:
        sys.exit(f"op_sweep: {exc}; install it with `pip install expecttest`")
    return op_db


def _op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


class _Slot:
    """Where the i-th tensor argument goes in a sample's (input, args, kwargs)."""

    def __init__(self, index: int):
        self.index = index


def _with_slots(value, tensors: list):
    import torch

    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return _Slot(len(tensors) - 1)
    if type(value) in (list, tuple):
        return type(value)(_with_slots(v, tensors) for v in value)
    if type(value) is dict:
        return {k: _with_slots(v, tensors) for k, v in value.items()}
    return value


def _fill(value, ts):
    """Plain Python that kiln's capture reads through (no pytree machinery from torch's internals)."""
    if isinstance(value, _Slot):
        return ts[value.index]
    if isinstance(value, (list, tuple)):
        return type(value)([_fill(v, ts) for v in value])
    if isinstance(value, dict):
        return {k: _fill(v, ts) for k, v in value.items()}
    return value


def _sample_fn_for_capture(op, sample):
    """The sample as a function kiln.compile can capture: tensors in, op called on the filled arguments."""
    tensors: list = []
    template = _with_slots((sample.input, sample.args, sample.kwargs), tensors)
    op_fn = op.op  # the callable itself (OpInfo objects are torch internals kiln does not read)

    global _TORCH
    import torch

    _TORCH = torch

    def fn(*ts):
        # names the torch module, a global: kiln's frame filter runs a frame whose only torch object is a
        # function in a closure cell uncompiled (as tensor-free), and a factory op's samples have no tensor
        _TORCH  # noqa: B018
        inp, args, kwargs = _fill(template, ts)
        return op_fn(inp, *args, **kwargs)

    # a code object of its own per sample: kiln skips a code object after 16 calls without tensors (a
    # factory op's samples), which would otherwise leave every later op's samples uncaptured
    _SAMPLE_CODES[0] += 1
    fn.__code__ = fn.__code__.replace(co_name=f"sample_{_SAMPLE_CODES[0]}")
    return fn, tensors


_SAMPLE_CODES = [0]
_TORCH = None  # the torch module once a sample function is made (see _sample_fn_for_capture)


def _sample_fn(op, sample):
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = [leaves[i] for i in positions]

    def fn(*ts):
        filled = list(leaves)
        for i, t in zip(positions, ts):
            filled[i] = t
        inp, args, kwargs = tree_unflatten(filled, spec)
        return op.op(inp, *args, **kwargs)

    return fn, tensors


def _clone(ts):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in ts]


def _forward_backward(fn, inputs, sample_dtype: str = "float32"):
    """(outputs, gradients of the inputs that require grad) with fixed random cotangents.

    The cotangents are rounded to the samples' dtype first: a float64 reference run of a bfloat16
    sample back-propagates the same values.
    """
    import torch
    from torch.utils._pytree import tree_flatten

    out = fn(*inputs)
    flat = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [t for t in inputs if t.requires_grad]
    if not flat or not wrt:
        return out, []
    gen = torch.Generator().manual_seed(1234)  # on the CPU: the same cotangents on every device
    cotangents = [torch.randn(o.shape, generator=gen).to(getattr(torch, sample_dtype)).to(dtype=o.dtype, device=o.device)
                  for o in flat]
    grads = torch.autograd.grad(flat, wrt, cotangents, allow_unused=True)
    return out, list(grads)


# (atol, rtol) of a compiled result against eager's, by the dtype of the samples. float32 as the sweep
# always had it; the others from torch.testing's defaults for the dtype (torch.testing._comparison:
# rtol 1.6e-2 for bfloat16, 1e-3 for float16, 1e-7 for float64), with atol raised to rtol for the
# low precision dtypes: a fused kernel rounds once where eager rounds after every op, about an ulp
# (2**-8 for bfloat16, 2**-11 for float16) apart near zero as well.
TOLERANCES = {"float32": (1e-4, 1e-4), "float64": (1e-7, 1e-7), "bfloat16": (1.6e-2, 1.6e-2), "float16": (1e-3, 1e-3)}


LOW_PRECISION = ("bfloat16", "float16")


def _compare(expected, got, dtype: str = "float32"):
    import torch

    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol, equal_nan=True, check_stride=False)


def _compare_low_precision(expected, got, reference, dtype: str):
    """torch's own rule for compiled low precision results (torch._dynamo.utils.same with fp64_ref).

    A float tensor not close to eager's still passes when its error against a float64 run of the
    same sample is at most 3 times eager's, plus atol/10: a fused kernel rounds less often than
    eager does, so near cancellations it can differ from eager by more than an ulp.
    """
    import torch
    from torch.utils._pytree import tree_flatten

    leaves = [tree_flatten(x)[0] for x in (expected, got, reference)]
    if len({len(x) for x in leaves}) != 1:
        raise AssertionError("the float64 run returned another structure")
    for e, g, r in zip(*leaves):
        try:
            _compare(e, g, dtype)
            continue
        except AssertionError as exc:
            if not (isinstance(g, torch.Tensor) and g.is_floating_point() and isinstance(r, torch.Tensor)
                    and r.shape == g.shape and torch.equal(g.isfinite(), e.isfinite())):
                raise
            message = " ".join([line for line in str(exc).splitlines() if line.strip()][1:3])
        finite = e.isfinite() & r.isfinite()

        def rmse(x, r=r, finite=finite):
            return (x.double() - r.double())[finite].pow(2).mean().sqrt().item() if finite.any() else 0.0

        if not rmse(g) <= 3.0 * rmse(e) + TOLERANCES[dtype][0] / 10:
            raise AssertionError(f"{message}; error against float64: {rmse(g):.3g}, eager's {rmse(e):.3g}")


class KilnFallback(Exception):
    """kiln ran a graph with ATen kernels (or eagerly) instead of the backend under test."""


def _require_training_path(compiled, example_inputs, grad: bool):
    """With --grad, a sample counts only when kiln took its training path (joint graph)."""
    from kiln.aot.training import TrainingRuntime

    if grad and any(getattr(t, "requires_grad", False) for t in example_inputs) \
            and not isinstance(compiled, TrainingRuntime):
        raise KilnFallback("kiln did not take the training path (joint graph) for this sample")
    return compiled


def _backend_under_test(backend: str, record: list, grad: bool = False):
    """A backend (gm, example_inputs) -> callable that raises ``KilnFallback`` instead of falling back.

    For "kiln", every graph it generates code for appends (kernels, extern ops) to ``record``.
    """
    from kiln.backends.aot_eager import compile_aot_eager

    if backend == "aot_eager":
        def aot_eager(gm, example_inputs):
            record.append((0, []))
            return _require_training_path(compile_aot_eager(gm, example_inputs, fallback=False), example_inputs, grad)

        return aot_eager

    from kiln.backends.kiln import kiln_backend

    def kiln_codegen(gm, example_inputs):
        compiled = kiln_backend(gm, example_inputs)
        graphs = getattr(compiled, "compiled_graphs", None)
        if not graphs or not getattr(compiled, "codegen_complete", False):
            explain = getattr(compiled, "kiln_explain", lambda: "")().splitlines()
            reason = next((line for line in explain if "ATen kernels" in line), explain[0] if explain else "no code generated")
            if "kernel build failed" in reason:
                raise RuntimeError(f"generated C++ did not build: {reason}")
            raise KilnFallback(reason)
        externs = [f"{step.node.node.op}: {step.node.node.reason}" for cg in graphs for step in cg.sched.steps
                   if not hasattr(step, "members")]
        n_kernels = sum(len(cg.kernels) for cg in graphs)
        record.append((n_kernels, externs))
        return _require_training_path(compiled, example_inputs, grad)

    return kiln_codegen


def _kiln_compile(fn, tensors, args, record):
    import torch.fx as fx

    backend = _backend_under_test(args.backend, record, args.grad)
    if args.frontend == "kiln" or args.dynamic:
        import kiln

        backend.kiln_dynamic = True  # (kiln's own backends under test: they take graphs with symbolic sizes)
        compiled = kiln.compile(fn, backend=backend, dynamic=True if args.dynamic else None)

        def run(*call_args):
            out = compiled(*call_args)
            if not record:  # the op ran as plain Python between graphs: not a pass for kiln
                raise KilnFallback("kiln captured no graph (the op ran as plain Python)")
            return out

        return run

    graph = fx.Graph()
    placeholders = [graph.placeholder(f"t{i}") for i in range(len(tensors))]
    graph.output(graph.call_function(fn, tuple(placeholders)))
    import torch

    gm = fx.GraphModule(torch.nn.Module(), graph)
    # Some OpInfos reseed the RNG inside the op (wrapper_set_seed). That Python side effect runs once,
    # while tracing; a capture frontend would run it before the graph on every call, so replay it.
    seeds = []
    real_seed = torch.manual_seed

    def recording_seed(seed):
        seeds.append(seed)
        return real_seed(seed)

    torch.manual_seed = recording_seed
    try:
        compiled = backend(gm, _clone(tensors))
    finally:
        torch.manual_seed = real_seed
    if not seeds:
        return compiled

    def reseeding(*call_args):
        real_seed(seeds[0])
        return compiled(*call_args)

    return reseeding


class TorchCapturedNothing(Exception):
    """torch.compile produced a correct result without aot_eager compiling any graph (dynamo fell back)."""


def _torch_compile(fn, backend: str, strict: bool, dynamic: bool = False):
    import torch

    torch._dynamo.reset()
    if not strict:
        return torch.compile(fn, backend=backend, dynamic=dynamic)
    # kiln's rule for torch too: at least one graph compiled by aot_eager, and no backend failure
    # (dynamo otherwise runs the frame eagerly and still gets eager's result)
    from torch._dynamo.backends.registry import lookup_backend

    aot_eager = lookup_backend(backend)
    record = {"graphs": 0, "failed": ""}

    def counting_aot_eager(gm, example_inputs):
        try:
            compiled_gm = aot_eager(gm, example_inputs)
        except Exception as exc:
            record["failed"] = record["failed"] or f"{type(exc).__name__}: {exc}"
            raise
        record["graphs"] += 1
        return compiled_gm

    compiled = torch.compile(fn, backend=counting_aot_eager, dynamic=dynamic)

    def run(*args):
        out = compiled(*args)
        if record["failed"]:
            raise TorchCapturedNothing(f"aot_eager failed, dynamo ran the code eagerly: {record['failed']}")
        if not record["graphs"]:
            raise TorchCapturedNothing("dynamo captured no graph (the op ran as plain Python)")
        return out

    return run


def _cuda_broken(device: str) -> str:
    """Why this process can no longer run CUDA kernels ("" while it can, and always on the CPU).

    An illegal memory access or a device-side assert poisons the process's CUDA context: every later
    call fails, eager's too, which would otherwise read as samples that eager cannot run.
    """
    if device != "cuda":
        return ""
    import torch

    try:
        torch.cuda.synchronize()
        (torch.ones(1, device="cuda") + 1).item()
    except Exception as exc:
        return f"CUDA context broken: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__}"
    return ""


def _upcast(ts, dtype):
    import torch

    return [t.detach().to(torch.float64).requires_grad_(t.requires_grad) if t.dtype == dtype else t.detach().clone()
            for t in ts]


# ops whose results are uninitialized memory: only their metadata is compared (values are whatever
# the allocator left there, in eager and compiled alike)
UNINITIALIZED = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
# ops some of whose results are random-generator state: without dropout (the OpInfo samples) CUDA returns
# them uninitialized or as the generator's position, which any extra draw before the call moves; only
# their metadata is compared (op name -> positions in the result tuple)
RNG_STATE_OUTPUTS = {"torch.ops.aten._efficient_attention_forward": (2, 3),
                     "torch.ops.aten._flash_attention_forward": (2, 3)}


def _mask_outputs(result, positions):
    """``result`` with the tensors at ``positions`` (of a tuple result) replaced by zeros of their size,
    dtype and device: only those are compared."""
    import torch

    if not positions or not isinstance(result, (tuple, list)):
        return result
    return type(result)(torch.zeros_like(r) if i in positions and isinstance(r, torch.Tensor) else r
                        for i, r in enumerate(result))


def _metadata(x):
    import torch

    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.dtype, x.device.type)
    if isinstance(x, (list, tuple)):
        return type(x)(_metadata(v) for v in x)
    return x


def _reference_fn(op, sample, dtype: str, capture: bool):
    """The sample's function for the float64 reference run: an argument naming the swept dtype
    (``cumsum(x, 1, dtype=torch.bfloat16)``) names float64 instead, or the "reference" would round as
    eager does and every more accurate result would fail the low precision rule."""
    import types

    import torch
    from torch.utils._pytree import tree_map

    low = getattr(torch, dtype)
    swap = lambda v: torch.float64 if v is low else v  # noqa: E731
    build = _sample_fn_for_capture if capture else _sample_fn  # (the one that made the sample's function:
    # the tensors fill the same slots)
    return build(op, types.SimpleNamespace(input=sample.input, args=tree_map(swap, sample.args),
                                           kwargs=tree_map(swap, sample.kwargs)))[0]


def _run_sample(compile_fn, fn, tensors, args, uninitialized=False, make_reference=None, rng_outputs=()):
    """'pass', 'mismatch', 'error' or 'fallback' (with a message), or None when eager fails."""
    import torch

    from kiln.fake import UnsupportedFakeOp

    def run(f, inputs):
        torch.manual_seed(0)
        if args.grad:  # (outputs, input gradients): only the op's own outputs hold random state
            out, grads = _forward_backward(f, inputs, args.dtype)
            out = (_mask_outputs(out, rng_outputs), grads)
        else:
            out = _mask_outputs(f(*inputs), rng_outputs)
        if args.device == "cuda":
            torch.cuda.synchronize()  # asynchronous kernel failures surface here, in the run that caused them
        return out

    try:
        expected_inputs = _clone(tensors)
        expected = run(fn, expected_inputs)
    except Exception:
        return None, ""
    try:
        compiled = compile_fn(fn, tensors)
        got_inputs = _clone(tensors)
        got = run(compiled, got_inputs)
    except (UnsupportedFakeOp, KilnFallback, TorchCapturedNothing) as exc:
        return "fallback", str(exc).splitlines()[0][:300]
    except Exception as exc:
        return "error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    expected, got = (expected, [t.detach() for t in expected_inputs]), (got, [t.detach() for t in got_inputs])
    if uninitialized:
        same = _metadata(expected) == _metadata(got)
        return ("pass", "") if same else ("mismatch", f"metadata {_metadata(got)} != eager's {_metadata(expected)}")
    try:
        _compare(expected, got, args.dtype)
    except Exception as exc:
        message = " ".join([line for line in str(exc).splitlines() if line.strip()][:3])[:300]
        if args.dtype not in LOW_PRECISION:
            return "mismatch", message
        try:
            reference_inputs = _upcast(tensors, getattr(torch, args.dtype))
            reference_fn = make_reference() if make_reference is not None else fn
            reference = (run(reference_fn, reference_inputs), [t.detach() for t in reference_inputs])
        except Exception:
            return "mismatch", message + " (and no float64 reference run)"
        try:
            _compare_low_precision(expected, got, reference, args.dtype)
        except Exception as exc:
            return "mismatch", str(exc).strip().splitlines()[0][:300]
    return "pass", ""


def _samples(op, args):
    """(the op's first --max-samples sample inputs, None), or (None, a result that skips the op)."""
    import torch

    dtype = getattr(torch, args.dtype)
    if args.grad and not op.supports_autograd:
        return None, {"kiln": "skip", "torch": "skip", "why": "the op does not support autograd"}
    if args.grad and dtype not in op.supported_backward_dtypes(args.device):
        return None, {"kiln": "skip", "torch": "skip", "why": f"no {args.dtype} backward on {args.device}"}
    samples = []
    try:
        for i, sample in enumerate(op.sample_inputs(args.device, dtype, requires_grad=args.grad)):
            if i >= args.max_samples:
                break
            samples.append(sample)
    except Exception as exc:
        return None, {"kiln": "skip", "torch": "skip", "why": f"sample_inputs failed: {exc}"}
    return samples, None


def _run_op(op, args) -> dict:
    samples, skipped = _samples(op, args)
    if skipped:
        return skipped
    result = {}
    names = ["kiln"] + (["torch"] if args.torch else [])
    kernels, externs = 0, []
    inductor = {"externs": [], "no_graph": 0}  # what Inductor did with the samples it got right
    for name in names:
        if result.get("cuda_broken"):
            result[name], result[f"{name}_why"] = "skip", "not run: the CUDA context broke in an earlier sample"
            continue
        statuses, why = [], ""
        capture = name == "kiln" and (args.frontend == "kiln" or args.dynamic)
        for sample in samples:
            fn, tensors = (_sample_fn_for_capture if capture else _sample_fn)(op, sample)
            record: list = []
            if name == "kiln":
                compile_fn = lambda f, ts, rec=record: _kiln_compile(f, ts, args, rec)  # noqa: E731
            else:
                compile_fn = lambda f, ts: _torch_compile(f, TORCH_BACKEND[args.backend], args.strict_torch,  # noqa: E731
                                                          args.dynamic)
            recording = name == "torch" and args.backend == "kiln"
            if recording:
                op_sweep_inductor.start_sample()
            # (built only where a low precision result is not close to eager's)
            make_reference = lambda s=sample, c=capture: _reference_fn(op, s, args.dtype, c)  # noqa: E731
            status, message = _run_sample(compile_fn, fn, tensors, args, uninitialized=op.name in UNINITIALIZED,
                                          make_reference=make_reference, rng_outputs=RNG_STATE_OUTPUTS.get(op.name, ()))
            if recording:
                _add_inductor_record(inductor, status, *op_sweep_inductor.finish_sample())
            broken = _cuda_broken(args.device)
            if broken:  # this sample broke it (the context worked before): an error, and the worker retires
                status, message = "error", f"{broken} (sample result: {status} {message})"[:300]
                result["cuda_broken"] = True
            if status is None:
                continue
            statuses.append(status)
            if status != "pass" and not why:
                why = message
            for n_kernels, ext in record:
                kernels += n_kernels
                externs += ext
            if broken:
                break
        if not statuses:
            result[name] = "skip"
        else:
            worst = next((s for s in ("error", "mismatch", "fallback") if s in statuses), "pass")
            result[name] = worst
        result[f"{name}_why"] = why
    if args.backend == "kiln":
        result["kernels"] = kernels
        result["externs"] = sorted(set(externs))
        if args.torch:
            result["torch_externs"] = sorted(set(inductor["externs"]))
            result["torch_no_graph"] = inductor["no_graph"]
    return result


def _add_inductor_record(inductor: dict, status, graphs: int, breaks: int, externs: list) -> None:
    """Count one torch.compile sample: its extern kernels, or 'no graph' when dynamo broke the graph or
    Inductor compiled none (dynamo's silent eager fallback, which the default rule counts as a pass)."""
    if status not in ("pass", "mismatch"):
        return
    if graphs == 0 or breaks:
        inductor["no_graph"] += 1
    inductor["externs"] += externs


def _warm_up(args):
    """One tiny compile through each compiler before any op's clock starts: imports, the CUDA context,
    the first C++/Triton build, so the first op of a (re)started worker is timed like any other."""
    import torch

    def add_one(x):
        return x + 1

    x = torch.ones(4, device=args.device, dtype=getattr(torch, args.dtype))
    try:
        _kiln_compile(add_one, [x], args, [])(x)
        if args.torch:
            _torch_compile(add_one, TORCH_BACKEND[args.backend], args.strict_torch)(x)
        if args.device == "cuda":
            torch.cuda.synchronize()
    except Exception:
        pass  # the ops report what fails


def _worker(conn, args):
    """One process: takes op names from ``conn`` and sends back ("done", name, result)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # inductor compiles in this process: no pool of compile workers in each of the sweep's processes
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    # every sample is traced, lowered and generated here: a whole graph loaded from kiln's warm cache (an
    # earlier sweep's, or another sample's: with --dynamic, samples of one op share graphs) records no
    # kernels or fallbacks to report
    os.environ.setdefault("KILN_WARM_CACHE", "0")
    import torch

    torch.set_num_threads(1)
    import warnings

    warnings.filterwarnings("ignore")
    ops = {_op_key(op): op for op in _op_db()}
    _warm_up(args)
    conn.send(("ready", None, None))
    while True:
        try:
            key = conn.recv()
        except EOFError:
            return
        if key is None:
            return
        try:
            out = _run_op(ops[key], args)
        except Exception:
            out = {"kiln": "error", "torch": "error" if args.torch else "-",
                   "kiln_why": traceback.format_exc().splitlines()[-1]}
        if args.device == "cuda":
            torch.cuda.empty_cache()  # several workers share the GPU's memory
        conn.send(("done", key, out))
        if out.get("cuda_broken") or _cuda_broken(args.device):
            return  # a fresh process (and CUDA context) takes the next op


def _shard(text: str) -> tuple[int, int]:
    """'I/N' -> (I, N): every N-th op starting at the I-th (0 <= I < N)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard wants I/N, like 0/4, not {text!r}") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard {text}: I must be 0..N-1")
    return index, count


def _select_ops(args) -> list[str]:
    """The swept ops in OpInfo's order: those matching --ops with the dtype on the device, then --shard."""
    import torch

    dtype = getattr(torch, args.dtype)
    keys = []
    words = [w for w in (args.ops or "").split(",") if w]
    for op in _op_db():
        key = _op_key(op)
        if words and not (key in words if args.exact else any(w in key for w in words)):
            continue
        try:
            if dtype not in op.supported_dtypes(args.device):
                continue
        except Exception:
            continue
        keys.append(key)
    index, count = args.shard
    return keys[index::count]


class _Pool:
    """Worker processes, one op at a time each, over a pipe of their own.

    A worker's op clock starts when the op is sent (after the worker's start-up), and a worker over
    --timeout is killed and replaced; killing one cannot disturb the others' pipes.
    """

    def __init__(self, args, keys: list[str]):
        self.args, self.keys, self.ctx = args, keys, mp.get_context("spawn")  # spawn: a CUDA context of its own in each
        self.busy: dict = {}  # connection -> [process, op or None, start time, has started]
        self.failed_starts = 0

    def start(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, self.args), daemon=True)
        proc.start()
        child.close()
        self.busy[parent] = [proc, None, 0.0, False]

    def send(self, conn, key):
        conn.send(key)
        self.busy[conn][1:3] = [key, time.time()]

    def retire(self, conn) -> tuple[str | None, str]:
        """Kill (if still alive) and forget a worker: (the op it was running, its exit code)."""
        proc, key, _, _ = self.busy.pop(conn)
        proc.kill()
        proc.join(5)
        conn.close()
        return key, str(proc.exitcode)

    def stop(self):
        for conn, (_, key, _, _) in self.busy.items():
            if key is None:
                try:
                    conn.send(None)
                except OSError:
                    pass
        for conn, (proc, _, _, _) in list(self.busy.items()):
            proc.join(1)
            self.retire(conn)


def sweep(args, keys: list[str], done: dict) -> dict:
    """Run the ops of ``keys`` not in ``done`` yet; results go into ``done`` (and --json as they come)."""
    pending = collections.deque(k for k in keys if k not in done)
    total = len(pending)
    pool = _Pool(args, keys)
    for _ in range(min(args.workers, total)):
        pool.start()
    t0 = time.time()
    try:
        while any(k not in done for k in keys):
            if args.time_limit and time.time() - t0 > args.time_limit:
                print(f"op_sweep: --time-limit {args.time_limit:.0f}s reached; "
                      f"{sum(k not in done for k in keys)} ops not run (--resume runs them)", flush=True)
                break
            for conn in mp.connection.wait(list(pool.busy), timeout=1.0):
                _receive(pool, conn, pending, done, args)
            _enforce_timeouts(pool, pending, done, args)
    finally:
        pool.stop()
    print(f"swept {sum(k in done for k in keys)} of {len(keys)} ops in {time.time() - t0:.0f}s "
          f"({args.workers} workers)", flush=True)
    return done


def _receive(pool, conn, pending, done, args):
    try:
        kind, key, out = conn.recv()
    except (EOFError, OSError):  # the worker died: crashed in an op, retired, or failed to start
        started = pool.busy[conn][3]
        key, code = pool.retire(conn)
        if key is not None:
            _finish(pool, done, key, {"kiln": "error", "torch": "error" if args.torch else "-",
                                      "kiln_why": f"worker crashed (exit code {code})"}, 0.0, args)
        elif not started:
            pool.failed_starts += 1
            if pool.failed_starts > 2 * args.workers:
                raise SystemExit(f"op_sweep: worker processes die while starting (last exit code {code})")
        if pending:
            pool.start()
        return
    if kind == "done" and key not in done:
        _finish(pool, done, key, out, time.time() - pool.busy[conn][2], args)
    pool.failed_starts = 0
    pool.busy[conn][1], pool.busy[conn][3] = None, True
    if pending:
        pool.send(conn, pending.popleft())


def _enforce_timeouts(pool, pending, done, args):
    now = time.time()
    for conn, (_, key, started, _) in list(pool.busy.items()):
        if key is not None and now - started > args.timeout:
            pool.retire(conn)
            _finish(pool, done, key, {"kiln": "timeout", "torch": "timeout" if args.torch else "-",
                                      "kiln_why": f"over {args.timeout:.0f}s"}, now - started, args)
            if pending:
                pool.start()


def _finish(pool, done, key, out, seconds, args):
    out["seconds"] = round(seconds, 1)
    done[key] = out
    if args.json:  # partial results survive a run that is cut off
        _save(args, done, pool.keys)
    if args.verbose:
        print(f"[{len(done)}/{len(pool.keys)}] {key}: kiln={out.get('kiln')} torch={out.get('torch', '-')} "
              f"({seconds:.0f}s)", flush=True)


def _save(args, done: dict, keys: list[str]) -> None:
    saved = {"args": vars(args), "selected": keys, "complete": all(k in done for k in keys), "results": done}
    with open(args.json + ".tmp", "w") as f:
        json.dump(saved, f, indent=1, sort_keys=True)
    os.replace(args.json + ".tmp", args.json)


def _default_workers() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(8, cpus)


def _check_device(device: str) -> None:
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        sys.exit(f"op_sweep: --device cuda needs a CUDA GPU, and torch.cuda.is_available() is False here "
                 f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'no CUDA'}); "
                 f"use --device cpu")


def _resumed(args) -> dict:
    """With --resume, the results already in --json (from the same sweep); otherwise none."""
    if not args.resume:
        return {}
    if not args.json:
        sys.exit("op_sweep: --resume reads and continues the --json file: name one")
    if not os.path.exists(args.json):
        return {}
    results, settings, _ = load_reports([args.json])
    if settings != settings_of(vars(args)):
        sys.exit(f"op_sweep: --resume: {args.json} is from a sweep with other settings ({settings})")
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="", help="comma-separated substrings of op names")
    parser.add_argument("--exact", action="store_true", help="--ops names whole op keys (e.g. from an earlier report)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=tuple(TOLERANCES), default="float32",
                        help="the samples' floating point dtype (ops without it on the device are not swept)")
    parser.add_argument("--max-samples", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per op")
    parser.add_argument("--workers", type=int, default=0, help="worker processes (default: min(8, CPUs))")
    parser.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N",
                        help="only every N-th op, starting at the I-th (0-based), in OpInfo's order")
    parser.add_argument("--time-limit", type=float, default=0.0,
                        help="stop after this many seconds, keeping what finished (for commands with a time limit)")
    parser.add_argument("--frontend", choices=("fx", "kiln"), default="fx")
    parser.add_argument("--dynamic", action="store_true",
                        help="compile with every dim symbolic (kiln and torch.compile dynamic=True; implies "
                             "--frontend kiln): the pass rate of size-generic graphs")
    parser.add_argument("--backend", choices=tuple(TORCH_BACKEND), default="kiln",
                        help="kiln's backend under test (compared with torch.compile's inductor / aot_eager)")
    parser.add_argument("--no-torch", dest="torch", action="store_false", help="skip torch.compile")
    parser.add_argument("--strict-torch", action="store_true",
                        help="count a torch pass only when aot_eager compiled at least one graph without failing "
                             "(kiln's rule; by default dynamo's silent eager fallbacks count as torch passes)")
    parser.add_argument("--grad", action="store_true", help="compare input gradients too (training path)")
    parser.add_argument("--json", default="", help="write per-op results here (as they come)")
    parser.add_argument("--resume", action="store_true", help="keep the results already in --json; run the rest")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--report", default="",
                        help="print the report of earlier --json files (comma-separated: the shards of one sweep) and exit")
    args = parser.parse_args(argv)
    if args.report:
        results, settings, notes = load_reports([p for p in args.report.split(",") if p])
        print("\n".join([report(results, settings)] + notes))
        return 0
    args.workers = args.workers or _default_workers()
    _check_device(args.device)
    keys = _select_ops(args)
    done = sweep(args, keys, _resumed(args))
    done = {k: r for k, r in done.items() if k in keys}
    print(report(done, settings_of(vars(args))))
    if args.json:
        _save(args, done, keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
