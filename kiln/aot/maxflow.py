"""A minimum s-t cut for the partition: Dinic's max-flow over integer capacities, in plain Python.

The partition's network (``kiln.aot.partition``) is a few thousand vertices for a GPT-2 training
graph, almost all of its edges infinite, and its finite capacities byte counts (ints). Dinic's
algorithm repeats two steps until the sink is unreachable in the residual network:

    levels   breadth-first distances from the source over edges with residual capacity
    block    push flow along shortest paths only (level + 1 each step), depth-first with a
             cursor per vertex so that a dead edge is never looked at twice in one phase

The minimum cut's sink side is then the set of vertices that can still reach the sink in the residual
network, and its source side everything else: the largest source side of any minimum cut (the same
set for every maximum flow). For the partition that means: among the cheapest cuts, the one that
computes the most in the forward and recomputes the least in the backward.
"""
from __future__ import annotations

import math
from collections import deque

INF = math.inf


class Unbounded(Exception):
    """A path of infinite capacity joins source and sink: no finite cut exists."""


class FlowNetwork:
    """Vertices are ints from ``add_vertex``; edge ``e`` and its reverse ``e ^ 1`` are stored in pairs."""

    def __init__(self) -> None:
        self.adjacent: list[list[int]] = []  # vertex -> ids of its outgoing edges (and reverses)
        self.head: list[int] = []  # edge -> the vertex it enters
        self.residual: list[float] = []  # edge -> capacity left

    def add_vertex(self) -> int:
        self.adjacent.append([])
        return len(self.adjacent) - 1

    def add_edge(self, u: int, v: int, capacity: float = INF) -> None:
        self.adjacent[u].append(len(self.head))
        self.head.append(v)
        self.residual.append(capacity)
        self.adjacent[v].append(len(self.head))
        self.head.append(u)
        self.residual.append(0)

    def reaching(self, sink: int) -> set[int]:
        """Vertices that reach ``sink`` over edges with residual capacity left."""
        seen = {sink}
        stack = [sink]
        while stack:
            v = stack.pop()
            for e in self.adjacent[v]:  # e: v -> u, so e ^ 1 is the edge u -> v
                u = self.head[e]
                if self.residual[e ^ 1] > 0 and u not in seen:
                    seen.add(u)
                    stack.append(u)
        return seen

    def _levels(self, source: int, sink: int) -> list[int] | None:
        level = [-1] * len(self.adjacent)
        level[source] = 0
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for e in self.adjacent[u]:
                v = self.head[e]
                if level[v] < 0 and self.residual[e] > 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level if level[sink] >= 0 else None

    def _blocking_flow(self, source: int, sink: int, level: list[int]) -> float:
        """Augment along level-increasing paths until none is left (iterative: paths can be long)."""
        adjacent, head, residual = self.adjacent, self.head, self.residual
        cursor = [0] * len(adjacent)
        total = 0
        path: list[int] = []  # edge ids from the source to ``u``
        u = source
        while True:
            if u == sink:
                pushed = min(residual[e] for e in path)
                if pushed == INF:
                    raise Unbounded("a path of infinite capacity joins source and sink")
                for e in path:
                    residual[e] -= pushed
                    residual[e ^ 1] += pushed
                total += pushed
                # go on from the tail of the first edge the push saturated
                first = next(i for i, e in enumerate(path) if residual[e] == 0)
                u = head[path[first] ^ 1]
                del path[first:]
                continue
            edges = adjacent[u]
            i = cursor[u]
            while i < len(edges):
                e = edges[i]
                if residual[e] > 0 and level[head[e]] == level[u] + 1:
                    break
                i += 1
            cursor[u] = i
            if i < len(edges):
                path.append(edges[i])
                u = head[edges[i]]
                continue
            if u == source:
                return total
            level[u] = -1  # a dead end for the rest of this phase
            e = path.pop()
            u = head[e ^ 1]
            cursor[u] += 1

    def min_cut(self, source: int, sink: int) -> tuple[float, set[int]]:
        """(the cut's capacity, its sink side). Raises ``Unbounded`` when no finite cut exists."""
        flow = 0
        while (level := self._levels(source, sink)) is not None:
            flow += self._blocking_flow(source, sink, level)
        return flow, self.reaching(sink)
