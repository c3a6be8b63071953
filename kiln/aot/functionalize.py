"""Functionalization: mutations and views become functional ATen ops.

Every traced tensor belongs to a *storage* (the memory it lives in). A storage has a *root*: a graph
input, a constant, or the fresh result of an op; the root's current value is an FX node. Every tensor
of the storage is the root seen through a chain of view steps (``slice``, ``permute``, ...).

A mutation of a tensor computes its new value functionally, then writes it back into the root through
the view chain with *scatter* ops (``slice_scatter``, ``select_scatter``, ...): the root gets a new
node and the storage a new version. Any other tensor of that storage is stale from then on; when an op
next reads it, it is rebuilt by replaying its view chain on the root's current value. Graph inputs
whose root changed are written back after the graph by the runtime wrapper.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.fx as fx

from kiln.aot.builder import GraphBuilder
from kiln.aot.symbols import size_hint
from kiln.decomp.utils import dense_permutation
from kiln.fake import UnsupportedFakeOp

aten = torch.ops.aten


@dataclasses.dataclass(frozen=True)
class ViewStep:
    """One view op applied to a tensor: ``func(tensor, *args, **kwargs)[index]``."""

    func: object
    args: tuple
    kwargs: tuple  # sorted (name, value) pairs
    index: int | None = None
    # an ``aten.detach`` that was the user's ``t.data``: replayed on real tensors as ``t.data``, whose
    # version counter is its own (``aten.detach``'s result shares its base's)
    own_version: bool = False

    def apply(self, tensor, sizes: dict | None = None):
        """Replay on a real tensor (the runtime uses this to rebuild output views of inputs);
        ``sizes``: the values of the size symbols in this call, for symbolic arguments (``SizeArg``)."""
        args, kwargs = self.args, dict(self.kwargs)
        if sizes is not None:
            from kiln.aot.symbols import resolve_sizes

            args, kwargs = resolve_sizes(args, sizes), {k: resolve_sizes(v, sizes) for k, v in kwargs.items()}
        if self.own_version:
            return tensor.data
        out = self.func(tensor, *args, **kwargs)
        return out if self.index is None else out[self.index]

    def frozen(self) -> "ViewStep":
        """This step with symbolic sizes as ``SizeArg``s, to replay on real tensors of any size."""
        from kiln.aot.symbols import freeze_sizes

        return dataclasses.replace(self, args=freeze_sizes(self.args),
                                   kwargs=tuple((k, freeze_sizes(v)) for k, v in self.kwargs))

    @property
    def symbolic(self) -> bool:
        from kiln.aot.symbols import has_size_args

        return has_size_args(self.args) or has_size_args(tuple(v for _, v in self.kwargs))

    def __str__(self) -> str:
        args = ", ".join(repr(a) for a in self.args)
        item = "" if self.index is None else f"[{self.index}]"
        return f"{self.func}({args}){item}"


# views that can show one element of their base at several places (a write through a view of them is
# scattered back by index over the whole chain: Functionalizer._scatter_chain_by_index)
REPEATING_VIEWS = frozenset({aten.expand.default, aten.as_strided.default, aten.unfold.default})


def _same_int(a, b) -> bool:
    """Equal ints, or symbolic ints of the same expression (structurally: no guard is added)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    expr_a = a if isinstance(a, int) else a.node.expr
    expr_b = b if isinstance(b, int) else b.node.expr
    return bool(expr_a == expr_b)


def same_layout(val, like) -> bool:
    """Same strides wherever they matter: dims of size 1 are indexed at 0 only, and an empty tensor
    has no elements to place."""
    if val.dim() != like.dim():
        return False
    sizes = like.shape
    if any(isinstance(n, int) and n == 0 for n in sizes):
        return True
    return all((isinstance(n, int) and n == 1) or _same_int(a, b)
               for n, a, b in zip(sizes, val.stride(), like.stride()))


def _covers_its_storage(val) -> bool:
    """Each element of ``val``'s storage is one element of ``val``: offset 0, no gaps, no overlap, no
    symbolic size. Then a tensor the graph computes with ``val``'s strides has eager's storage layout,
    and ``as_strided`` (which indexes the storage from its start) means the same on both."""
    if any(not isinstance(n, int) for n in (*val.shape, *val.stride(), val.storage_offset())):
        return False
    if val.storage_offset() != 0 or val.untyped_storage().nbytes() != val.numel() * val.element_size():
        return False
    return dense_permutation(val)


@dataclasses.dataclass(eq=False)
class Storage:
    root: fx.Node  # current value of the root tensor
    input_index: int | None = None  # flat graph input whose memory this is, if any
    version: int = 0
    metadata_mutated: bool = False

    def __post_init__(self) -> None:
        self.origin = self.root  # the node that made (or is) the storage: eager's memory while root is it

    @property
    def mutated(self) -> bool:
        return self.version > 0

    def check_storage_view(self) -> None:
        """An ``as_strided`` of this storage is about to be traced on ``root``: refuse it where ``root``
        is a value the graph computed (after a write) that does not have eager's storage layout (an
        input viewing a larger storage, or with an offset: ``as_strided`` reaches memory outside it)."""
        if self.root is not self.origin and not _covers_its_storage(self.origin.meta["val"]):
            raise UnsupportedFakeOp(aten.as_strided.default, "kiln cannot trace as_strided of a tensor written in the graph when the "
                                    "tensor does not cover its whole storage from offset 0 (as_strided indexes the "
                                    "storage, which the graph's new value of the tensor does not have)")


@dataclasses.dataclass(eq=False)
class Value:
    storage: Storage
    steps: tuple[ViewStep, ...]
    node: fx.Node
    version: int


class Functionalizer:
    """Tracks storages and views of traced tensors, and emits functional ops for their mutations."""

    def __init__(self, builder: GraphBuilder) -> None:
        self.b = builder

    # reading ----------------------------------------------------------------------------------
    def current(self, value: Value) -> fx.Node:
        """The node holding ``value``'s contents now, rebuilt from its root if it went stale."""
        if value.version != value.storage.version:
            node = value.storage.root
            if any(step.func is aten.as_strided.default for step in value.steps):
                value.storage.check_storage_view()
            for step in value.steps:
                node = self.replay(step, node)
            value.node, value.version = node, value.storage.version
        return value.node

    def replay(self, step: ViewStep, node: fx.Node) -> fx.Node:
        out = self.b.call(step.func, (node, *step.args), dict(step.kwargs))
        return out if step.index is None else self.b.getitem(out, step.index)

    # writing ----------------------------------------------------------------------------------
    def write(self, value: Value, new: fx.Node) -> None:
        """Make ``new`` the contents of ``value`` (same shape), updating its storage's root."""
        storage = value.storage
        if any(step.func in REPEATING_VIEWS for step in value.steps):
            result = self._scatter_chain_by_index(storage.root, value.steps, new, storage.origin)
        else:
            chain = [storage.root]
            for step in value.steps[:-1]:
                chain.append(self.replay(step, chain[-1]))
            result = new
            for step, parent in zip(reversed(value.steps), reversed(chain)):
                result = self.scatter(step, parent, result)
        storage.root = self.keep_layout(result, storage.root.meta["val"])
        storage.version += 1
        # ``new`` stands for the written tensor only where it has that tensor's layout (later views of it
        # were traced on the eager layout); otherwise the tensor is made again from the root when read
        if same_layout(new.meta["val"], value.node.meta["val"]):
            value.node, value.version = new, storage.version
        else:
            value.version = -1

    def keep_layout(self, node: fx.Node, like) -> fx.Node:
        """``node`` (a root's value after a write through a view) laid out as ``like`` (the root before
        it). Eager writes in place, so the root keeps its strides; the scatters compute a new tensor whose
        strides follow the view's (``permute(cumsum(x.t()), [1, 0])`` is column-major where ``x`` was
        row-major). The fake values the tracer gives later views of the storage are made the eager way,
        in the root's layout: the graph's node must have that layout too, or code that indexes the node
        by those strides reads the wrong elements (and the graph returns another layout than eager)."""
        val = node.meta["val"]
        if same_layout(val, like):
            return node
        if not all(isinstance(v, int) for v in like.stride()) or not dense_permutation(like):
            # (a slice of a larger tensor: no tensor of its own has its strides; views of the new value
            # take their meta from it, AtenTracer._view, so they index it as it is)
            return node
        order = sorted(range(like.dim()), key=lambda d: (-size_hint(like.stride()[d]), d))  # outermost first
        inverse = [order.index(d) for d in range(like.dim())]
        dense = self.b.call(aten.clone.default, (self.b.call(aten.permute.default, (node, order)),),
                            {"memory_format": torch.contiguous_format})
        out = self.b.call(aten.permute.default, (dense, inverse))
        if not same_layout(out.meta["val"], like):
            raise UnsupportedFakeOp(aten.permute.default, "kiln cannot functionalize a write through a view of a "
                                    f"tensor with strides {tuple(like.stride())} (not a permutation of a dense "
                                    "layout): it could not keep them")
        return out

    def scatter(self, step: ViewStep, parent: fx.Node, src: fx.Node) -> fx.Node:
        """The value of ``parent`` after its view ``step`` is overwritten with ``src``."""
        func, args = step.func, step.args
        kwargs = dict(step.kwargs)
        if kwargs:
            return self._scatter_by_index(step, parent, src)
        parent_val = parent.meta["val"]
        if func in (aten.alias.default, aten.detach.default, aten.lift_fresh.default):
            return src
        if func is aten.slice.Tensor:
            return self.b.call(aten.slice_scatter.default, (parent, src, *args))
        if func is aten.select.int:
            return self.b.call(aten.select_scatter.default, (parent, src, *args))
        if func is aten.diagonal.default:
            return self.b.call(aten.diagonal_scatter.default, (parent, src, *args))
        if func in (aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default,
                    aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default):
            return self.b.reshape(src, parent_val.shape)
        if func is aten.permute.default:
            dims = [d % parent_val.dim() for d in args[0]] if parent_val.dim() else []
            inverse = [dims.index(i) for i in range(len(dims))]
            return self.b.call(aten.permute.default, (src, inverse))
        if func in (aten.transpose.int, aten.t.default):
            return self.replay(step, src)  # a transpose is its own inverse
        if func is aten.expand.default and tuple(src.meta["val"].shape) == tuple(parent_val.shape):
            return src
        if func is aten.split.Tensor and step.index is not None:
            size, dim = args[0], (args[1] if len(args) > 1 else 0)
            dim %= max(parent_val.dim(), 1)
            start = step.index * size
            end = min(start + size, parent_val.shape[dim])
            return self.b.call(aten.slice_scatter.default, (parent, src, dim, start, end))
        if func is aten.split_with_sizes.default and step.index is not None:
            sizes, dim = args[0], (args[1] if len(args) > 1 else 0)
            dim %= max(parent_val.dim(), 1)
            start = sum(sizes[: step.index])
            return self.b.call(aten.slice_scatter.default, (parent, src, dim, start, start + sizes[step.index]))
        if func is aten.unbind.int and step.index is not None:
            dim = args[0] if args else 0
            return self.b.call(aten.select_scatter.default, (parent, src, dim, step.index))
        return self._scatter_by_index(step, parent, src)

    def _scatter_chain_by_index(self, root: fx.Node, steps: tuple, src: fx.Node, origin: fx.Node | None = None
                                ) -> fx.Node:
        """The root's value after the view ``steps`` of it is overwritten with ``src`` (one step: any view
        ``scatter`` has no inverse for), and for a chain with a view that repeats elements (``x.unsqueeze(0).expand(3, 3, 4)[1].mul_(3)``): the whole chain
        replayed on ``arange(numel)`` says which root element each written element is, and only those
        are written. Scattering step by step would write the whole expanded tensor back, its unchanged
        copies included, over the written ones. (The written view itself does not repeat elements:
        capture refuses writes to such tensors, as eager mostly does.) ``as_strided`` indexes the storage:
        there the positions are laid out as ``origin`` (the storage's first node: eager's memory) is, which
        must hold nothing but the root (``_covers_its_storage``)."""
        root_val = root.meta["val"]
        if root_val.is_complex() or src.meta["val"].dtype != root_val.dtype:
            raise UnsupportedFakeOp(steps[-1].func, "kiln cannot functionalize a mutation through this view")
        positions = self.b.call(aten.arange.start_step, (0, root_val.numel(), 1),
                                {"dtype": torch.int64, "device": root_val.device})
        covered = self.b.reshape(positions, root_val.shape)
        if any(step.func is aten.as_strided.default for step in steps):
            origin = (origin if origin is not None else root).meta["val"]
            if not _covers_its_storage(origin):
                raise UnsupportedFakeOp(aten.as_strided.default, "kiln cannot functionalize a write through "
                                        "as_strided of a tensor that does not cover its whole storage from "
                                        "offset 0 (the write may reach memory outside the tensor)")
            covered = self.keep_layout(covered, origin)
        try:
            for step in steps:
                covered = self.replay(step, covered)
        except RuntimeError as exc:
            raise UnsupportedFakeOp(steps[-1].func, f"kiln cannot functionalize a mutation through this view: {exc}")
        flat_new = self.b.call(aten.index_put.default, (self.b.reshape(root, (-1,)), [self.b.reshape(covered, (-1,))],
                                                        self.b.reshape(src, (-1,))))
        return self.b.reshape(flat_new, root_val.shape)

    def _scatter_by_index(self, step: ViewStep, parent: fx.Node, src: fx.Node) -> fx.Node:
        """Any view: apply it to ``arange(numel)`` to learn which elements it covers, then index_put."""
        return self._scatter_chain_by_index(parent, (step,), src)

