"""GraphBuilder: appends ATen calls to an FX graph, with each node's fake value in ``node.meta["val"]``."""
from __future__ import annotations

import operator
import re

import torch
import torch.fx as fx
from torch.utils._pytree import tree_map

from kiln.fake import run_on_fakes
from kiln.fake.unbacked import allow_unbacked

aten = torch.ops.aten


def node_val(x):
    return x.meta["val"] if isinstance(x, fx.Node) else x


class GraphBuilder:
    """Owns the ATen graph being built. ``provenance`` is stamped on every node it makes."""

    def __init__(self) -> None:
        self.graph = fx.Graph()
        self.root = torch.nn.Module()  # holds constants that get_attr nodes name
        self.provenance: dict = {}
        self._n_consts = 0
        self.sizes = None  # a SizeNodes where sizes are symbolic (kiln/aot/symbols.py)

    def use_symbolic_sizes(self, env) -> None:
        """SymInt arguments become size nodes from here on (a graph traced with symbolic sizes)."""
        from kiln.aot.symbols import SizeNodes

        self.sizes = SizeNodes(self.graph, env, self._stamp)

    def _stamp(self, node: fx.Node) -> fx.Node:
        node.meta.update(self.provenance)
        return node

    def placeholder(self, name: str, val) -> fx.Node:
        name = re.sub(r"\W", "_", name)
        if not name or name[0].isdigit():
            name = "_" + name
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        if placeholders:
            with self.graph.inserting_after(placeholders[-1]):
                node = self.graph.placeholder(name)
        else:
            first = next(iter(self.graph.nodes), None)
            if first is None:
                node = self.graph.placeholder(name)
            else:
                with self.graph.inserting_before(first):
                    node = self.graph.placeholder(name)
        node.meta["val"] = val
        if self.sizes is not None:
            self.sizes.bind(node, val)
        return node

    def constant(self, real: torch.Tensor, val) -> fx.Node:
        name = f"_const_{self._n_consts}"
        self._n_consts += 1
        self.root.register_buffer(name, real, persistent=False)
        node = self._stamp(self.graph.get_attr(name))
        node.meta["val"] = val
        return node

    def call(self, func, args: tuple = (), kwargs: dict | None = None, val=None) -> fx.Node:
        """Append ``func(*args, **kwargs)``; args hold nodes. Computes the fake result unless given."""
        kwargs = kwargs or {}
        if self.sizes is not None:
            args, kwargs = self.sizes.map_args(tuple(args)), self.sizes.map_args(dict(kwargs))
        if val is None:
            with allow_unbacked(self.sizes.env if self.sizes is not None else None):
                val = run_on_fakes(func, tree_map(node_val, args), tree_map(node_val, kwargs))
        node = self._stamp(self.graph.call_function(func, tuple(args), dict(kwargs)))
        node.meta["val"] = val
        if self.sizes is not None:
            self.sizes.bind_result(node, val)
        return node

    def getitem(self, node: fx.Node, index: int) -> fx.Node:
        for user in node.users:
            if user.target is operator.getitem and user.args[1] == index:
                return user
        item = self._stamp(self.graph.call_function(operator.getitem, (node, index)))
        item.meta["val"] = node.meta["val"][index]
        return item

    def reshape(self, node: fx.Node, shape) -> fx.Node:
        """``view`` when the layout allows it, else a contiguous copy then ``view``."""
        try:
            return self.call(aten.view.default, (node, list(shape)))
        except RuntimeError:
            copy = self.call(aten.clone.default, (node,), {"memory_format": torch.contiguous_format})
            return self.call(aten.view.default, (copy, list(shape)))

    def output(self, values: list) -> fx.Node:
        return self.graph.output(tuple(values))
