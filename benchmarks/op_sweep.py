"""Op sweep: PyTorch's OpInfo database through a kiln backend and the matching torch.compile backend.

For every OpInfo that supports float32 on CPU, each sample input (up to --max-samples) becomes a
function of its tensors, compiled by kiln and by torch.compile, and both are compared with eager.

--backend kiln (the default): kiln's code generation (lowering to loop IR, fusion, generated C++
kernels) against torch.compile's default backend (inductor). "fallback" then means kiln ran the graph
with ATen kernels (aot_eager) because it could not trace or lower it. For ops that pass, the report
also counts how many ran entirely through generated kernels and how many needed ATen fallbacks
(extern kernels) inside the generated code, and which ops fell back most.
--backend aot_eager: kiln's "aot_eager" (ATen tracing, decompositions, functionalization, the core-op
graph run with eager ATen) against torch.compile(backend="aot_eager"); "fallback" means kiln ran the
graph eagerly because it could not trace it.

An op passes when all its samples match; "error" means kiln (or torch) raised where eager did not.

    python benchmarks/op_sweep.py                      # everything, 2 worker processes
    python benchmarks/op_sweep.py --ops add,softmax    # ops whose name contains a word
    python benchmarks/op_sweep.py --no-torch --json sweep.json
    python benchmarks/op_sweep.py --backend aot_eager

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
import os
import queue
import sys
import time
import traceback

# this checkout's kiln, not whichever one is installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STATUSES = ("pass", "mismatch", "error", "fallback", "timeout", "skip")


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

    def fn(*ts):
        inp, args, kwargs = _fill(template, ts)
        return op_fn(inp, *args, **kwargs)

    return fn, tensors


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


def _forward_backward(fn, inputs):
    """(outputs, gradients of the inputs that require grad) with fixed random cotangents."""
    import torch
    from torch.utils._pytree import tree_flatten

    out = fn(*inputs)
    flat = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [t for t in inputs if t.requires_grad]
    if not flat or not wrt:
        return out, []
    gen = torch.Generator().manual_seed(1234)
    cotangents = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in flat]
    grads = torch.autograd.grad(flat, wrt, cotangents, allow_unused=True)
    return out, list(grads)


def _compare(expected, got):
    import torch

    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4, equal_nan=True, check_stride=False)


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
    if args.frontend == "kiln":
        import kiln

        compiled = kiln.compile(fn, backend=backend)

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


def _torch_compile(fn, backend: str, strict: bool):
    import torch

    torch._dynamo.reset()
    if not strict:
        return torch.compile(fn, backend=backend, dynamic=False)
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

    compiled = torch.compile(fn, backend=counting_aot_eager, dynamic=False)

    def run(*args):
        out = compiled(*args)
        if record["failed"]:
            raise TorchCapturedNothing(f"aot_eager failed, dynamo ran the code eagerly: {record['failed']}")
        if not record["graphs"]:
            raise TorchCapturedNothing("dynamo captured no graph (the op ran as plain Python)")
        return out

    return run


def _run_sample(compile_fn, fn, tensors, grad=False):
    """'pass', 'mismatch', 'error' or 'fallback' (with a message), or None when eager fails."""
    import torch

    from kiln.fake import UnsupportedFakeOp

    def run(f, inputs):
        return _forward_backward(f, inputs) if grad else f(*inputs)

    try:
        torch.manual_seed(0)
        expected_inputs = _clone(tensors)
        expected = run(fn, expected_inputs)
    except Exception:
        return None, ""
    try:
        compiled = compile_fn(fn, tensors)
        got_inputs = _clone(tensors)
        torch.manual_seed(0)
        got = run(compiled, got_inputs)
    except (UnsupportedFakeOp, KilnFallback, TorchCapturedNothing) as exc:
        return "fallback", str(exc).splitlines()[0][:300]
    except Exception as exc:
        return "error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    try:
        _compare(expected, got)
        _compare([t.detach() for t in expected_inputs], [t.detach() for t in got_inputs])
    except Exception as exc:
        return "mismatch", str(exc).strip().splitlines()[0][:300]
    return "pass", ""


TORCH_BACKEND = {"kiln": "inductor", "aot_eager": "aot_eager"}


def _run_op(op, args) -> dict:
    import torch

    samples = []
    if args.grad and not op.supports_autograd:
        return {"kiln": "skip", "torch": "skip", "why": "the op does not support autograd"}
    try:
        for i, sample in enumerate(op.sample_inputs("cpu", torch.float32, requires_grad=args.grad)):
            if i >= args.max_samples:
                break
            samples.append(sample)
    except Exception as exc:
        return {"kiln": "skip", "torch": "skip", "why": f"sample_inputs failed: {exc}"}
    result = {}
    names = ["kiln"] + (["torch"] if args.torch else [])
    kernels, externs = 0, []
    for name in names:
        statuses, why = [], ""
        for sample in samples:
            if name == "kiln" and args.frontend == "kiln":
                fn, tensors = _sample_fn_for_capture(op, sample)
            else:
                fn, tensors = _sample_fn(op, sample)
            record: list = []
            if name == "kiln":
                compile_fn = lambda f, ts, rec=record: _kiln_compile(f, ts, args, rec)  # noqa: E731
            else:
                compile_fn = lambda f, ts: _torch_compile(f, TORCH_BACKEND[args.backend], args.strict_torch)  # noqa: E731
            status, message = _run_sample(compile_fn, fn, tensors, args.grad)
            if status is None:
                continue
            statuses.append(status)
            if status != "pass" and not why:
                why = message
            for n_kernels, ext in record:
                kernels += n_kernels
                externs += ext
        if not statuses:
            result[name] = "skip"
        else:
            worst = next((s for s in ("error", "mismatch", "fallback") if s in statuses), "pass")
            result[name] = worst
        result[f"{name}_why"] = why
    if args.backend == "kiln":
        result["kernels"] = kernels
        result["externs"] = sorted(set(externs))
    return result


def _worker(tasks, results, args):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    import warnings

    warnings.filterwarnings("ignore")
    ops = {_op_key(op): op for op in _op_db()}
    while True:
        key = tasks.get()
        if key is None:
            return
        results.put(("start", key, os.getpid()))
        try:
            out = _run_op(ops[key], args)
        except Exception:
            out = {"kiln": "error", "kiln_why": traceback.format_exc().splitlines()[-1]}
        results.put(("done", key, (os.getpid(), out)))


def _select_ops(args) -> list[str]:
    import torch

    keys = []
    words = [w for w in (args.ops or "").split(",") if w]
    for op in _op_db():
        key = _op_key(op)
        if words and not any(w in key for w in words):
            continue
        try:
            if torch.float32 not in op.supported_dtypes("cpu"):
                continue
        except Exception:
            continue
        keys.append(key)
    return keys


def sweep(args) -> dict:
    keys = _select_ops(args)
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    for key in keys:
        tasks.put(key)
    workers = {}

    def start_worker():
        p = ctx.Process(target=_worker, args=(tasks, results, args), daemon=True)
        p.start()
        workers[p.pid] = [p, None, 0.0]  # process, current op, start time
        return p

    for _ in range(args.workers):
        start_worker()
    done: dict[str, dict] = {}
    t0 = time.time()
    while len(done) < len(keys):
        try:
            kind, key, payload = results.get(timeout=1.0)
            if kind == "start":
                if payload in workers:
                    workers[payload][1], workers[payload][2] = key, time.time()
            elif key not in done:
                pid, out = payload
                done[key] = out
                if pid in workers:
                    workers[pid][1] = None
                if args.json:  # partial results survive a run that is cut off
                    _save(args, done)
                if args.verbose:  # noqa: SIM102
                    print(f"[{len(done)}/{len(keys)}] {key}: kiln={out.get('kiln')} torch={out.get('torch', '-')}", flush=True)
        except queue.Empty:
            pass
        now = time.time()
        for pid, (proc, key, started) in list(workers.items()):
            if key is not None and now - started > args.timeout:
                proc.kill()
                done[key] = {"kiln": "timeout", "torch": "timeout" if args.torch else "-", "kiln_why": f"over {args.timeout}s"}
                del workers[pid]
                start_worker()
            elif not proc.is_alive() and key is not None:
                done[key] = {"kiln": "error", "torch": "error" if args.torch else "-", "kiln_why": "worker crashed"}
                del workers[pid]
                start_worker()
    for _ in workers:
        tasks.put(None)
    print(f"swept {len(keys)} ops in {time.time() - t0:.0f}s", flush=True)
    return done


def _save(args, done: dict) -> None:
    with open(args.json + ".tmp", "w") as f:
        json.dump({"args": vars(args), "results": done}, f, indent=1, sort_keys=True)
    os.replace(args.json + ".tmp", args.json)


def report(done: dict, with_torch: bool, backend: str = "aot_eager") -> str:
    torch_name = f"torch.compile(backend={TORCH_BACKEND[backend]!r})"
    lines = [f"kiln backend {backend!r} vs {torch_name}"]
    counts = {name: collections.Counter(r.get(name, "-") for r in done.values()) for name in ("kiln", "torch")}
    lines.append(f"{'':8s}" + "".join(f"{s:>10s}" for s in STATUSES))
    for name in ("kiln", "torch") if with_torch else ("kiln",):
        lines.append(f"{name:8s}" + "".join(f"{counts[name][s]:10d}" for s in STATUSES))
    if with_torch:
        torch_pass = {k for k, r in done.items() if r.get("torch") == "pass"}
        both = {k for k in torch_pass if done[k].get("kiln") == "pass"}
        share = 100.0 * len(both) / max(len(torch_pass), 1)
        lines.append(f"kiln passes {len(both)} of the {len(torch_pass)} ops torch passes ({share:.1f}%)")
        sound = {k for k in torch_pass if done[k].get("kiln") in ("pass", "fallback")}
        lines.append(f"counting kiln's fallbacks (ATen's results): "
                     f"{len(sound)} of {len(torch_pass)} ({100.0 * len(sound) / max(len(torch_pass), 1):.1f}%)")
        lines.append(f"kiln passes {len(({k for k, r in done.items() if r.get('kiln') == 'pass'}) - torch_pass)} ops that torch does not")
    if backend == "kiln":
        lines += _codegen_report(done)
    mismatches = sorted(k for k, r in done.items() if r.get("kiln") == "mismatch")
    lines.append(f"kiln mismatches (wrong results; each is a bug) ({len(mismatches)}):")
    for k in mismatches:
        lines.append(f"  {k:40s} {done[k].get('kiln_why', '')[:150]}")
    failing = sorted(k for k, r in done.items() if r.get("kiln") not in ("pass", "skip", "mismatch")
                     and (not with_torch or r.get("torch") == "pass"))
    lines.append(f"other kiln failures{' where torch passes' if with_torch else ''} ({len(failing)}):")
    for k in failing:
        lines.append(f"  {k:40s} {done[k]['kiln']:9s} {done[k].get('kiln_why', '')[:150]}")
    return "\n".join(lines)


def _codegen_report(done: dict) -> list[str]:
    """How the ops kiln passes ran: entirely in generated kernels, or with ATen extern kernels."""
    passed = {k: r for k, r in done.items() if r.get("kiln") == "pass"}
    generated = sorted(k for k, r in passed.items() if not r.get("externs") and r.get("kernels", 0) > 0)
    no_kernels = sorted(k for k, r in passed.items() if not r.get("externs") and not r.get("kernels", 0))
    mixed = sorted(k for k, r in passed.items() if r.get("externs") and r.get("kernels", 0) > 0)
    aten_only = sorted(k for k, r in passed.items() if r.get("externs") and not r.get("kernels", 0))
    lines = [f"of the {len(passed)} ops kiln passes: {len(generated)} ran fully in generated kernels, "
             f"{len(mixed)} in generated kernels plus ATen fallbacks, {len(aten_only)} only in ATen fallbacks, "
             f"{len(no_kernels)} needed no kernel (views/aliases of inputs)"]
    by_op: collections.Counter = collections.Counter()
    for r in done.values():
        for e in r.get("externs", []):
            by_op[e] += 1
    if by_op:
        lines.append("ATen fallbacks inside generated code (op: reason -> number of swept ops using it):")
        for e, n in by_op.most_common(40):
            lines.append(f"  {n:4d}  {e[:140]}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="", help="comma-separated substrings of op names")
    parser.add_argument("--max-samples", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per op")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--frontend", choices=("fx", "kiln"), default="fx")
    parser.add_argument("--backend", choices=tuple(TORCH_BACKEND), default="kiln",
                        help="kiln's backend under test (compared with torch.compile's inductor / aot_eager)")
    parser.add_argument("--no-torch", dest="torch", action="store_false", help="skip torch.compile")
    parser.add_argument("--strict-torch", action="store_true",
                        help="count a torch pass only when aot_eager compiled at least one graph without failing "
                             "(kiln's rule; by default dynamo's silent eager fallbacks count as torch passes)")
    parser.add_argument("--grad", action="store_true", help="compare input gradients too (training path)")
    parser.add_argument("--json", default="", help="write per-op results here")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--report", default="", help="print the report of an earlier --json file and exit")
    args = parser.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            saved = json.load(f)
        print(report(saved["results"], saved["args"]["torch"], saved["args"].get("backend", "aot_eager")))
        return 0
    done = sweep(args)
    print(report(done, args.torch, args.backend))
    if args.json:
        _save(args, done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
