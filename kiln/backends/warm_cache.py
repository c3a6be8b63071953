"""Warm start: a persistent whole-graph cache, so that a new process that captures a graph it compiled
before skips ATen tracing, decompositions, lowering, scheduling and code generation (docs/caching.md).

An entry holds what the ``kiln`` backend made of one captured graph: the runtime's view of the ATen
graph's inputs and outputs (which state tensors, by name; mutated inputs; output views), the wrapper's
source and what its namespace held (kernels, ATen ops, constants), and the kernels: the C++ library's
source and binary. Capture and guards still run in every process: the key (``warm_key.py``) is computed
from the captured graph, so a graph that differs in anything the generated code depends on has
another key.

Files: ``<cache_dir>/graphs/<key[:2]>/<key>.kgraph``: a header line, the payload's SHA-256, then the
pickled entry. Written to a temporary file and renamed (atomic); a file whose checksum, header or
key does not match, or that fails to load, is removed and the graph compiled again: a bad entry costs
one compile, never a failure or wrong code.

Cached: inference and training graphs whose code kiln generated whole (C++ or Triton), with a
training graph's backward variants (``keep_variants``). Graphs with symbolic sizes and graphs with
ATen-kernel fallbacks compile as before (``stats.warm_cache`` counts why).
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import io
import os
import pickle
import tempfile
import types

import torch
from torch.utils._pytree import treespec_dumps, treespec_loads

from kiln.aot.graph import AtenGraph, InputSpec
from kiln.aot.runtime import AtenRuntime, version_steps
from kiln.aot.training import TrainingRuntime
from kiln.codegen.wrapper_runtime import WRAPPER_HELPERS, Wrapper
from kiln.backends.warm_key import graph_device
from kiln.debug.stats import stats

MAGIC = b"KILN-GRAPH-1\n"
ENTRY_FORMAT = 3
_HELPERS = WRAPPER_HELPERS
_VALUE_TYPES = (int, float, complex, bool, str, type(None), torch.dtype, torch.device, torch.layout,
                torch.memory_format, torch.Size, torch.Tensor)

# Entries this process made or loaded, and those an artifact brought (``kiln.load``), by key.
ENTRIES: dict[str, dict] = {}


class NotStorable(Exception):
    """Why a compiled graph gets no entry."""


# -- making an entry ------------------------------------------------------------------------------


def make_entry(key: str, runtime, graphs: list, explain_text: str, options) -> dict:
    """The entry of a runtime whose graphs (``[(role, CompiledGraph)]``: one for inference, forward and
    backward for training) all have generated code; raises NotStorable."""
    plan = getattr(runtime, "plan", None)
    if len({cg.target for _, cg in graphs}) != 1 or len(graphs) != (1 if plan is None else 2):
        raise NotStorable("not one inference graph or one forward and one backward graph")
    spec = plan.joint if plan is not None else runtime.aten_graph
    entry = {
        "format": ENTRY_FORMAT, "key": key, "target": graphs[0][1].target,
        "kind": "inference" if plan is None else "training",
        "inputs": [(s.kind, s.name, s.mutated) for s in spec.inputs],
        "mutated": list(spec.mutated_inputs), "outputs": list(spec.outputs), "out_spec": _dump_spec(spec.out_spec),
        "sizes": spec.sizes, "explain": explain_text, "graphs": [_graph_part(role, cg, options) for role, cg in graphs],
    }
    if plan is not None:
        entry.update(num_fwd_outputs=spec.num_fwd_outputs, differentiable=list(spec.differentiable),
                     grad_inputs=list(spec.grad_inputs), grad_mode_after=spec.grad_mode_after)
    else:
        entry["grad_mode_after"] = runtime.aten_graph.grad_mode_after
    return entry


def _graph_part(role: str, cg, options) -> dict:
    part = {"role": role, "wrapper": cg.wrapper.source, "namespace": _namespace_entry(cg)}
    part.update(_cpp_kernels(cg, options) if cg.target == "cpp" else _triton_kernels(cg))
    return part


def _cpp_kernels(cg, options) -> dict:
    from kiln.codegen.cpp.build import library_path

    binary = b""
    if cg.kernels:
        with open(library_path(cg.source, options), "rb") as f:
            binary = f.read()
    return {"kernels": {k.name: (len(k.params), len(k.size_args), bool(getattr(k, "checks_bounds", False)))
                        for k in cg.kernels.values()},
            "library_source": cg.source if cg.kernels else "", "library_binary": binary}


def _triton_kernels(cg) -> dict:
    """The Triton kernels without their launchers (made again at load), and their parameters' dtypes.
    Autotune choices stay in the tune files beside the module in the cache directory."""
    from kiln.codegen.triton.kernel import TritonKernel

    kernels = {}
    for k in cg.kernels.values():
        if type(k) is not TritonKernel:
            raise NotStorable(f"a {type(k).__name__} (matmul templates are not cached yet)")
        kernels[k.name] = dataclasses.replace(k, fn=None, origins=tuple(str(o) for o in k.origins))
    buffers = cg.lg.buffers()  # (once: it is rebuilt on each call)
    dtypes = {name: buffers[name].dtype for k in kernels.values() for name, _ in k.params}
    return {"kernels": kernels, "library_source": cg.source, "param_dtypes": dtypes}


def _namespace_entry(cg) -> dict:
    kernels = {id(k.fn): k.name for k in cg.kernels.values()}
    errors = {id(getattr(k, "take_error", None)) for k in cg.kernels.values()}
    ops = {}
    from kiln.schedule.scheduler import ExternStep

    for step in cg.sched.steps:
        if isinstance(step, ExternStep):
            op = step.node.node.op
            ops[id(getattr(op, "_op", op))] = op
    out = {}
    helpers = _helpers(cg.target != "cpp")
    for name, value in cg.wrapper.namespace.items():
        if name in helpers and value is helpers[name]:
            out[name] = ("helper", name)
        elif getattr(value, "__name__", None) in helpers and value is helpers[value.__name__]:
            out[name] = ("helper", value.__name__)
        elif id(value) in kernels:
            out[name] = ("kernel", kernels[id(value)])
        elif id(value) in errors and value is not None:
            out[name] = ("take_error",)
        elif id(value) in ops:
            out[name] = ("aten",) + _op_name(ops[id(value)])
        elif _plain_value(value):
            out[name] = ("value", value)
        else:
            raise NotStorable(f"the wrapper holds a {type(value).__name__} ({name})")
    return out


def _dump_spec(spec) -> str:
    try:
        return treespec_dumps(spec)
    except Exception as exc:  # noqa: BLE001 -- a container pytree cannot serialize
        raise NotStorable(f"output structure: {type(exc).__name__}: {exc}") from None


def _op_name(op) -> tuple[str, str, str]:
    if not isinstance(op, torch._ops.OpOverload):
        raise NotStorable(f"an extern call of {op!r}, not an ATen op overload")
    namespace, name = op._schema.name.split("::")
    return namespace, name, op._overloadname


def _plain_value(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain_value(v) for v in value)
    return type(value) in _VALUE_TYPES or type(value) is torch.nn.Parameter


# -- rebuilding a runtime -------------------------------------------------------------------------


def build_runtime(entry: dict, gm, options):
    """The runtime an entry describes, bound to the parameters and buffers of ``gm`` (this process's
    captured graph); raises on anything that does not fit (the caller compiles instead)."""
    from kiln.aot.trace import state_tensors

    state_by_name = state_tensors(gm)
    inputs = [InputSpec(kind, name, mutated) for kind, name, mutated in entry["inputs"]]
    state = []
    for spec in inputs:
        if spec.kind == "user":
            continue
        tensor, kind = state_by_name[spec.name]
        if kind != spec.kind:
            raise ValueError(f"state {spec.name} is a {kind}, the entry has a {spec.kind}")
        state.append(tensor)
    runs = [_load_graph(part, entry["target"], options, gm) for part in entry["graphs"]]
    out_spec = treespec_loads(entry["out_spec"])
    if entry["kind"] == "training":
        joint = types.SimpleNamespace(
            inputs=inputs, state=state, mutated_inputs=entry["mutated"], outputs=entry["outputs"], out_spec=out_spec,
            sizes=entry["sizes"], num_fwd_outputs=entry["num_fwd_outputs"], differentiable=entry["differentiable"],
            grad_inputs=entry["grad_inputs"], grad_mode_after=entry["grad_mode_after"])
        runtime = TrainingRuntime(joint, *runs)
        runtime.backward_without = lambda absent: _stored_variant(entry, absent, options, gm)
    else:
        ag = AtenGraph(None, inputs, state, entry["mutated"], entry["outputs"], out_spec, entry["sizes"],
                       entry["grad_mode_after"])
        runtime = AtenRuntime(ag, run=runs[0])
        runtime.aten_graph = ag
    runtime.steps = version_steps(gm, entry["mutated"], len(inputs) - len(state), state)
    text = entry["explain"]
    runtime.kiln_explain = lambda: "loaded from kiln's warm cache (no tracing, lowering or code generation " \
                                   "in this process)\n" + text
    runtime.compiled_graph, runtime.compiled_graphs, runtime.codegen_complete = None, [], True
    runtime.warm_key = entry["key"]
    if "race_ops" in entry:  # (choose_faster.should_race: entries made before it was kept are not raced)
        runtime.warm_race_ops = entry["race_ops"]
    return runtime


def _variant_key(absent: tuple) -> str:
    return ",".join(map(str, absent))


def _stored_variant(entry: dict, absent: tuple, options, gm):
    """The backward variant for these absent tangents kept in the entry (aot/training.py), loaded; None
    where no process compiled it (the runtime then passes zeros, as autograd would)."""
    part = entry.get("variants", {}).get(_variant_key(absent))
    return _load_graph(part, entry["target"], options, gm) if part is not None else None


def _load_graph(part: dict, target: str, options, gm):
    """One graph's wrapper function, with its kernels loaded; its error messages name the lines of
    ``gm``, this process's graph (which may sit on other lines than the one stored)."""
    kernels = _load_library(part, options) if target == "cpp" else _load_triton(part, target, options)
    namespace = {name: _namespace_value(spec, kernels) for name, spec in part["namespace"].items()}
    locations = _user_locations(gm) if "<<at:" in part["wrapper"] else {}  # (only a wrapper with messages)
    return Wrapper(part["wrapper"], namespace, locations=locations).compile()


def _user_locations(gm) -> dict:
    """{node name: file:line} of the captured graph's calls (what error messages name)."""
    from kiln.aot.tracer import stack_trace
    from kiln.codegen.locations import location_in_trace

    return {n.name: location_in_trace(stack_trace(n)) for n in gm.graph.nodes if n.op.startswith("call")}


def _load_library(entry: dict, options) -> dict:
    """Kernel name -> its C++ function (and "take_error": the library's error flag)."""
    if not entry["kernels"]:
        return {}
    from kiln.codegen.cpp.build import install_library, load_library

    install_library(entry["library_source"], entry["library_binary"], options)
    lib = load_library(entry["library_source"], options)
    fns = {}
    for name, (n_params, n_sizes, _) in entry["kernels"].items():
        fn = fns[name] = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p] * n_params + [ctypes.c_int64] * n_sizes
        fn.restype = None
    lib.kiln_take_error.restype = ctypes.c_int
    fns["take_error"] = lib.kiln_take_error
    return fns


class _Dtype:
    def __init__(self, dtype):
        self.dtype = dtype


def _load_triton(entry: dict, target: str, options) -> dict:
    """Kernel name -> its launcher, made as ``load_kernels`` makes them for a fresh compile."""
    from kiln.codegen.triton import build as triton_build

    kernels = {name: dataclasses.replace(k) for name, k in entry["kernels"].items()}
    buffers = {name: _Dtype(dtype) for name, dtype in entry["param_dtypes"].items()}
    interpret = target == "triton-interpreted"
    source = triton_build.load_kernels(kernels, buffers, options, interpret=interpret)
    if source != entry["library_source"]:
        raise ValueError("the Triton module's source differs from the entry's")
    fns = {name: k.fn for name, k in kernels.items()}
    checking = [k for k in kernels.values() if getattr(k, "take_error", None) is not None]
    if checking:  # (interpreted kernels that check indices: the helpers' flag, as load_kernels set it)
        fns["take_error"] = checking[0].take_error
    return fns


def _helpers(triton: bool = True) -> dict:
    if not triton:
        return _HELPERS
    from kiln.codegen.triton.launch import refresh_launch_hooks

    return {**_HELPERS, "refresh_launch_hooks": refresh_launch_hooks}


def _namespace_value(spec: tuple, kernels: dict):
    kind = spec[0]
    if kind == "helper":
        return _helpers()[spec[1]]
    if kind == "kernel":
        return kernels[spec[1]]
    if kind == "take_error":
        return kernels["take_error"]
    if kind == "aten":
        op = load_op(*spec[1:])
        return getattr(op, "_op", op)
    if kind == "value":
        return spec[1]
    raise ValueError(f"unknown namespace entry {spec!r}")


# -- files ------------------------------------------------------------------------------------------


def entry_path(key: str, options) -> str:
    return os.path.join(options.cache_dir, "graphs", key[:2], f"{key}.kgraph")


class _Pickler(pickle.Pickler):
    """Pickles ATen op overloads (view steps of outputs hold them) by name."""

    def reducer_override(self, obj):
        if isinstance(obj, torch._ops.OpOverload):
            return load_op, _op_name(obj)
        return NotImplemented


def load_op(namespace: str, name: str, overload: str):
    if namespace == "kiln":  # (kiln's own ops are defined when their module is imported)
        import kiln.aot.attention_op  # noqa: F401
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def dumps(payload: object) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(payload)
    return buf.getvalue()


def encode(payload: object, magic: bytes = MAGIC) -> bytes:
    data = dumps(payload)
    return magic + hashlib.sha256(data).hexdigest().encode() + b"\n" + data


def decode(blob: bytes, magic: bytes = MAGIC):
    """The payload of ``encode``; raises ValueError for a file that is not one, damaged or cut short."""
    if not blob.startswith(magic):
        raise ValueError("not a kiln file of this format (header differs)")
    digest, sep, data = blob[len(magic):].partition(b"\n")
    if not sep or hashlib.sha256(data).hexdigest().encode() != digest:
        raise ValueError("checksum mismatch (the file is damaged or cut short)")
    return pickle.loads(data)


def write_atomically(path: str, blob: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)  # a reader sees the whole file or none
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def store(entry: dict, options) -> None:
    """Keep ``entry`` in this process and on disk; raises NotStorable for one that cannot be pickled."""
    try:
        blob = encode(entry)
    except Exception as exc:  # noqa: BLE001 -- whatever cannot be pickled: no entry
        raise NotStorable(f"not picklable: {type(exc).__name__}: {exc}") from None
    ENTRIES[entry["key"]] = entry
    try:
        write_atomically(entry_path(entry["key"], options), blob)
        stats.warm_cache["stored"] += 1
    except OSError as exc:  # a full disk or a read-only cache: this process keeps its compiled code
        stats.warm_cache[f"not written: {type(exc).__name__}"] += 1


def read(key: str, options) -> dict | None:
    """The entry for ``key`` (from an artifact or the disk), or None; a bad file is removed."""
    entry = ENTRIES.get(key)
    if entry is not None:
        return entry
    path = entry_path(key, options)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    try:
        entry = decode(blob)
        if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT or entry.get("key") != key:
            raise ValueError("entry of another format or key")
    except Exception as exc:  # noqa: BLE001 -- any damage: removed, compiled again
        discard(key, options, f"bad file: {exc}")
        return None
    return entry


def discard(key: str, options, why: str) -> None:
    ENTRIES.pop(key, None)
    stats.warm_cache[f"refused: {why}"[:120]] += 1
    try:
        os.unlink(entry_path(key, options))
    except OSError:
        pass


# -- the backend's side ----------------------------------------------------------------------------


class WarmStart:
    """One captured graph's trip through the warm cache: ``lookup()`` returns a runtime built from an
    entry, or None (``self.key`` is then set where the graph may be stored); ``store(runtime, compiler)``
    after the compile. Why a graph is not cached is counted in ``stats.warm_cache``."""

    def __init__(self, gm, example_inputs, options, target: str):
        self.gm, self.example_inputs, self.options, self.target = gm, example_inputs, options, target
        self.key: str | None = None

    def lookup(self):
        from kiln.aot.symbols import shape_env_of
        from kiln.backends.warm_key import graph_key

        if not self.options.warm_cache:
            return None
        with stats.timed("warm_cache"):
            if shape_env_of(self.gm) is not None:
                why = "symbolic sizes"
            else:
                self.key, why = graph_key(self.gm, self.example_inputs, self.options, self.target)
            if self.key is None:
                stats.warm_cache[f"uncacheable: {why}"[:120]] += 1
                return None
            entry = read(self.key, self.options)
            if entry is None:
                stats.warm_cache["misses"] += 1
                return None
            try:
                runtime = build_runtime(entry, self.gm, self.options)
            except Exception as exc:  # noqa: BLE001 -- an entry that does not fit: compiled again
                discard(self.key, self.options, f"{type(exc).__name__}: {exc}")
                return None
            ENTRIES[self.key] = entry
            stats.warm_cache["hits"] += 1
            self.gm.meta["kiln_warm_key"] = self.key
            return runtime

    def store(self, runtime, compiler) -> None:
        """Keep ``runtime`` (what the backend made of the graph) where it is complete generated code."""
        if self.key is None:
            return
        with stats.timed("warm_cache"):
            graphs = [(role, cg) for role, cg, _ in compiler.compiled]
            if not graphs or any(cg is None for _, cg in graphs):
                stats.warm_cache["not stored: a graph runs with ATen kernels"] += 1
                return
            try:
                entry = make_entry(self.key, runtime, graphs, compiler.explain(), self.options)
                entry["device"] = graph_device(self.example_inputs)
                entry["race_ops"] = _race_ops(self.gm, runtime)
                store(entry, self.options)
            except NotStorable as exc:
                stats.warm_cache[f"not stored: {exc}"[:120]] += 1
                return
            self.gm.meta["kiln_warm_key"] = self.key

    def keep_variants(self, runtime, compiler) -> None:
        """Backward variants (aot/training.py) compiled later in this process are added to the entry,
        so a runtime loaded from it runs them too."""
        compile_variant = getattr(runtime, "backward_without", None)
        if self.key is None or compile_variant is None or self.key not in ENTRIES:
            return

        def compile_and_keep(absent):
            run = compile_variant(absent)
            role, cg, _ = compiler.compiled[-1]
            entry = ENTRIES.get(self.key)
            if entry is not None and cg is not None and role.startswith("backward without"):
                with stats.timed("warm_cache"):
                    entry.setdefault("variants", {})[_variant_key(absent)] = _graph_part(role, cg, self.options)
                    try:
                        store(entry, self.options)
                    except NotStorable as exc:
                        stats.warm_cache[f"variant not stored: {exc}"[:120]] += 1
            return run

        runtime.backward_without = compile_and_keep

    # -- the speed choice (choose_faster.py) kept with the entry ------------------------------------

    def stored_choice(self) -> dict | None:
        """The choose_faster decision kept in this graph's entry, or None."""
        entry = ENTRIES.get(self.key) if self.key is not None else None
        return None if entry is None else entry.get("speed_choice")

    def record_choice(self, choice: dict) -> None:
        """Keep ``choice`` in the entry (in this process and on disk): later processes replay it."""
        entry = ENTRIES.get(self.key) if self.key is not None else None
        if entry is None:
            return
        with stats.timed("warm_cache"):
            entry["speed_choice"] = choice
            try:
                store(entry, self.options)
            except NotStorable as exc:
                stats.warm_cache[f"speed choice not stored: {exc}"[:120]] += 1


def _race_ops(gm, runtime) -> str | None:
    """choose_faster's verdict on the graph's ops (random ops, collectives), kept with the entry: a loaded
    graph has no ATen graph to check."""
    from kiln.backends.choose_faster import ops_reason

    aten_gm = getattr(getattr(runtime, "aten_graph", None), "gm", None) or getattr(runtime, "joint_gm", None)
    if aten_gm is None:
        return "no ATen graph to check for random ops"
    return ops_reason(list(gm.graph.nodes) + list(aten_gm.graph.nodes))
