"""ATen tracing: torch-level FX graph -> functional ATen FX graph (``aot_trace``), and its runtime."""
from kiln.aot.graph import AtenGraph, InputSpec, OutputSpec, format_graph, verify
from kiln.aot.runtime import AtenRuntime
from kiln.aot.trace import aot_trace

__all__ = ["AtenGraph", "AtenRuntime", "InputSpec", "OutputSpec", "aot_trace", "format_graph", "verify"]
