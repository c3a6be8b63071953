"""The wrapper: one Python function per graph that allocates buffers, calls kernels and extern ATen
ops in schedule order, frees buffers after their last use, and returns the graph's outputs.

It is generated as source text (printable, dumped under ``KILN_DEBUG_DIR``) and compiled with
``exec`` against a small namespace of kernels and helpers.
"""
from __future__ import annotations

import dataclasses

import sympy
import torch
from torch.utils._pytree import tree_map

from kiln.codegen.common import error_locations, index_error_message, print_index_py
from kiln.codegen.wrapper_runtime import (EXTERN_ARGUMENT_ADAPTERS, INPLACE_FLAG, WRAPPER_HELPERS,  # noqa: F401
                                         Wrapper, ensure_layout, pointer_call, tensor_call)
from kiln.loopir.nodes import ComputedBuffer, ConstantBuffer, ExternOutput, InputBuffer, Stored, unbacked_sizes
from kiln.loopir.sizes import derived_values, shape_env, value_checks
from kiln.schedule.scheduler import ExternStep, Schedule


class WrapperGen:
    """``kernel_call(fn, buffer names)`` writes one kernel call: the per-backend hook.

    ``inplace`` maps buffers to the inputs whose memory they are computed into (the new values of
    mutated inputs, ``schedule/inplace.py``) while the wrapper's ``_INPLACE`` global is true; it starts as
    ``inplace_at_once`` (the backend turns it on after a first call whose kernels all built)."""

    def __init__(self, lg, sched: Schedule, kernels: dict, buffers: dict, kernel_call=pointer_call, prologue=None,
                 inplace: dict | None = None, inplace_at_once: bool = True, unguarded_inputs: bool = False):
        self.lg, self.sched, self.kernels, self.buffers = lg, sched, kernels, buffers
        # inputs no guard checked (a backward's saved tensors, made by the forward's code): a layout other
        # than the trace's is copied into the trace's before a kernel indexes it with the trace's strides
        self.unguarded_inputs = unguarded_inputs
        self.kernel_call = kernel_call
        self.prologue = prologue  # a function the wrapper calls first when it launches kernels
        self.inplace = dict(inplace or {})
        self.lines: list[str] = []
        self.ns: dict = dict(WRAPPER_HELPERS)
        if self.inplace:
            self.ns[INPLACE_FLAG] = inplace_at_once
        self._consts = 0
        self.symbols: set = set()  # size symbols printed into the code
        self.unbacked_bound: set = set()  # unbacked sizes read from extern results (_bind_unbacked)

    def size(self, e) -> str:
        """A size (int or sympy expression over size symbols) as Python source."""
        if isinstance(e, sympy.Basic) and not e.is_number:
            self.symbols |= e.free_symbols
            text = print_index_py(e)
            return text if e.is_Symbol else f"({text})"
        return str(int(e))

    def sizes(self, seq) -> str:
        items = [self.size(e) for e in seq]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"

    def _bind_symbols(self, args) -> tuple[list[str], set]:
        """``s0 = arg0.size(0)`` for each size symbol that is a dim of an input, once."""
        lines, bound = [], set()
        for name, n in self.lg.int_inputs.items():  # int arguments that are symbols: ``s0 = arg_n``
            if isinstance(n, sympy.Symbol) and n not in bound:
                bound.add(n)
                lines.append(f"{n.name} = {name}")
                if n in self.symbols:  # (a kernel takes it)
                    lines.append(f"check_int64({n.name}, {name!r})")
        for b in self.lg.inputs:
            for d, n in enumerate(b.size):
                if isinstance(n, sympy.Symbol) and n not in bound:
                    bound.add(n)
                    lines.append(f"{n.name} = {b.name}.size({d})")
        for v, expr in derived_values().items():  # values the kernels read, in Python's ints (exact_value)
            if v in self.symbols:
                bound.add(v)
                wrap = ", wrap=True" if v in getattr(shape_env(), "wrapped", ()) else ""
                lines.append(f"{v.name} = check_int64({print_index_py(expr)}, {str(expr)!r}{wrap})")
        for v, dtypes in value_checks().items():  # values converted as eager's full/fill_ do (checked_value)
            if v in self.symbols:
                for dtype in sorted(dtypes, key=str):
                    lines.append(f"check_fits({v.name}, {self.const(dtype, 'dtype')})")
        return lines, bound

    def const(self, value, hint: str) -> str:
        name = f"{hint}{self._consts}"
        self._consts += 1
        self.ns[name] = value
        return name

    def ref(self, v: Stored) -> str:
        """A Python expression for a strided view ``v`` of a buffer."""
        b = v.buffer
        if v.is_whole_buffer():
            return b.name
        held = (InputBuffer, ExternOutput, ConstantBuffer)
        off = f"{b.name}.storage_offset() + {self.size(v.offset)}" if isinstance(b, held) else self.size(v.offset)
        return f"{b.name}.as_strided({self.sizes(v.size)}, {self.sizes(v.stride)}, {off})"

    def generate(self) -> Wrapper:
        args = list(self.lg.arg_names) or [b.name for b in self.lg.inputs]
        for c in self.lg.constants:
            self.ns[c.name] = c.value
        last_use, extern_inputs = self._last_uses()
        outputs = {o.buffer.name for o in self.lg.outputs if isinstance(o, Stored)}
        pool: dict[tuple, list[str]] = {}
        body: list[str] = []
        locations: dict = {}
        if self.prologue is not None and self.kernels:
            body.append(f"{self.const(self.prologue, self.prologue.__name__)}()")
        if self.unguarded_inputs:
            body += self._input_layouts(args)
        for i, step in enumerate(self.sched.steps):
            if not isinstance(step, ExternStep):  # a fused group or a matmul template: one kernel
                kernel = self.kernels[step.name]
                for name, kind in kernel.params:
                    b = self.buffers[name]
                    if kind == "out" and isinstance(b, (ComputedBuffer, ExternOutput)):
                        body.append(self._alloc(b, pool))
                fn = self.const(kernel.fn, "k")
                call = self.kernel_call(fn, [name for name, _ in kernel.params],
                                        [self.size(e) for e in getattr(kernel, "size_args", ())])
                body.append(f"{call}  # {kernel.name}")
                if getattr(kernel, "checks_bounds", False):
                    err = self.const(kernel.take_error, "take_error")
                    inlined = tuple(o for m in getattr(step, "members", ()) for o in getattr(m.node, "inlined", ()))
                    body.append(f"if (error := {err}()): raise kernel_error(error, "
                                f"{index_error_message(kernel, inlined)!r})")
                    locations.update(error_locations(kernel, inlined))
            else:
                body += self._extern(step)
            for name in sorted(n for n, last in last_use.items() if last == i):
                if name in outputs or name in args or name in self.ns:
                    continue
                b = self.buffers[name]
                if isinstance(b, ComputedBuffer) and name not in extern_inputs:
                    pool.setdefault(_pool_key(b), []).append(name)  # deleted when a later buffer takes it
                else:
                    body.append(f"del {name}")
        outs = [self.ref(o) if isinstance(o, Stored) else self.const(o, "c") for o in self.lg.outputs]
        body.append(f"return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
        binds, bound = self._bind_symbols(args) if self.symbols else ([], set())
        src = [f"def call({', '.join(args)}):"] + ["    " + line for line in binds + body]
        return Wrapper("\n".join(src) + "\n", self.ns, set(self.symbols), bound | self.unbacked_bound, locations)

    def _input_layouts(self, args) -> list[str]:
        """``x = ensure_layout(x, size, stride)`` for each input the trace saw with strides that are not
        row-major. The forward's code may realize such a value (a slice of a wider product, saved for the
        backward) as a dense buffer of its own, and its backward indexed it with the slice's strides: the
        gradients read memory outside the tensor."""
        from kiln.loopir.nodes import contiguous_strides

        lines = []
        for b in self.lg.inputs:
            if b.name not in args or not self.kernels:
                continue
            if tuple(sympy.expand(s) for s in contiguous_strides(b.size)) == tuple(sympy.expand(s) for s in b.stride):
                continue
            if any(st == 0 for n, st in zip(b.size, b.stride) if n != 1):
                continue  # (an expanded value: reading a dense copy with stride 0 reads equal elements, and
                # a layout whose elements overlap cannot be written)
            lines.append(f"{b.name} = ensure_layout({b.name}, {self.sizes(b.size)}, {self.sizes(b.stride)})")
        return lines

    def _alloc(self, b: ComputedBuffer, pool) -> str:
        size, stride = b.allocation()
        if b.name in self.inplace:
            target = self.inplace[b.name]
            (inp,) = [i for i in self.lg.inputs if i.name == target]
            if tuple(inp.size) != tuple(size):  # the same row-major memory with split loops
                target = f"{target}.view({self.sizes(size)})"
            return f"{b.name} = {target} if {INPLACE_FLAG} else {self._empty(b)}  # in place"
        key = _pool_key(b)
        free = pool.get(key)
        if free:
            old = free.pop()
            if self.buffers[old].allocation() == (size, stride):
                return f"{b.name} = {old}; del {old}  # reuses {old}"
            return f"{b.name} = {old}.as_strided({self.sizes(size)}, {self.sizes(stride)}); del {old}  # reuses {old}"
        return f"{b.name} = {self._empty(b)}"

    def _empty(self, b: ComputedBuffer) -> str:
        """A new tensor for buffer ``b``, as Python source."""
        size, stride = b.allocation()
        dtype = f"torch.{str(b.dtype).replace('torch.', '')}"
        return f"empty_strided({self.sizes(size)}, {self.sizes(stride)}, dtype={dtype}, device='{b.device}')"

    def py(self, v) -> str:
        """A Python expression for an extern call's argument."""
        if isinstance(v, _Raw):
            return v.text
        if isinstance(v, sympy.Basic):
            return self.size(v)
        if isinstance(v, (torch.dtype, torch.layout, torch.memory_format)):
            return f"torch.{str(v).replace('torch.', '')}"
        if isinstance(v, torch.device):
            return f"torch.device({str(v)!r})"
        if isinstance(v, (list, tuple)):
            inner = ", ".join(self.py(x) for x in v)
            return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            return f"float('{v}')"
        if v is None or isinstance(v, (bool, int, float, str)):
            return repr(v)
        return self.const(v, "arg")

    def _extern(self, step: ExternStep) -> list[str]:
        k = step.node.node
        op = self.const(getattr(k.op, "_op", k.op), "aten_")  # the C++ op behind the OpOverload: what its __call__ calls
        args, kwargs = tree_map(lambda v: _Raw(self.ref(v)) if isinstance(v, Stored) else v, (k.args, k.kwargs))
        schema = getattr(getattr(k.op, "_schema", None), "name", None)
        adapters = EXTERN_ARGUMENT_ADAPTERS.get(schema, {})
        args = [_Raw(f"{adapters[i]}({a})") if i in adapters and isinstance(a, _Raw) else a for i, a in enumerate(args)]
        call = ", ".join([self.py(a) for a in args] + [f"{key}={self.py(v)}" for key, v in kwargs.items()])
        lines = [f"{k.name} = {op}({call})  # {k.reason}"]
        for out in k.outputs:
            path = "".join(f"[{i}]" for i in out.path)
            lines += self._bind_unbacked(f"{k.name}{path}", out.size)
            lines.append(f"{out.name} = ensure_layout({k.name}{path}, {self.sizes(out.size)}, {self.sizes(out.stride)})")
        lines.append(f"del {k.name}")
        return lines

    def _bind_unbacked(self, result: str, size) -> list[str]:
        """``u0 = buf3.size(0)``: a data-dependent size (an unbacked symbol) read from the ATen result
        that made it, once; later kernels take it as a size argument like an input's size."""
        lines = []
        for d, n in unbacked_sizes(size):
            if n not in self.unbacked_bound:
                self.unbacked_bound.add(n)
                lines.append(f"{n.name} = {result}.size({d})")
        return lines

    def _last_uses(self):
        last: dict[str, int] = {}
        extern_inputs: set[str] = set()  # read by an extern that may return or change them: never reused
        for i, step in enumerate(self.sched.steps):
            if not isinstance(step, ExternStep):
                names = [n for n, _ in self.kernels[step.name].params]
            else:
                names = list(step.node.read_names) + list(step.node.writes)
                if not _returns_fresh_tensors(step.node.node.op):
                    extern_inputs |= step.node.read_names
            for n in names:
                last[n] = i
        return last, extern_inputs


# Ops whose results are views of their input although their schema has no alias annotation.
_UNANNOTATED_VIEWS = {"aten::_unsafe_view", "aten::unsafe_chunk", "aten::unsafe_split", "aten::unsafe_split_with_sizes"}


def _returns_fresh_tensors(op) -> bool:
    """Whether ``op``'s results never alias its arguments and it mutates none (no alias annotation in
    its schema: mm, convolution, attention, ...): a buffer it read can be reused once it returned.
    The ``unsafe_*`` views carry no annotation but return views: their input is never reused."""
    schema = getattr(op, "_schema", None)
    if schema is None or schema.name in _UNANNOTATED_VIEWS:
        return False
    return all(r.alias_info is None for r in schema.returns) and all(a.alias_info is None for a in schema.arguments)


def _pool_key(b) -> tuple:
    return (b.numel, b.dtype, str(b.device))


class _Raw:
    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


