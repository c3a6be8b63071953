"""A user Triton kernel launch as one op of the graph: ``kiln_user::triton_launch``.

Capture records ``kernel[grid](args..., META=...)`` as

    kiln_user.triton_launch(launch_id, written=[tensors the kernel stores through], read=[other tensors])

The schema marks ``written`` as mutated (``Tensor(a!)[]``), so AOT functionalization gives the launch
fresh copies of those tensors and writes them back (``aot/functional_twin.py``); the kiln backend runs
it as an extern call, in graph order. Everything that is not a tensor (the kernel object, the grid, the
constant arguments, the meta-parameters) lives in the ``LaunchSpec`` the id names; launching calls the
user's own kernel object (``kernel[grid](...)``), so Triton compiles, caches and autotunes it as in
eager. Each tensor is handed to the kernel with the strides it had while tracing (the kernel's index
arithmetic may depend on them): a tensor that arrives in another layout is copied into that layout first.
"""
from __future__ import annotations

import dataclasses
import threading

import torch

LIBRARY_NAME = "kiln_user"
_LIB = torch.library.Library(LIBRARY_NAME, "FRAGMENT")
_LIB.define("triton_launch(int launch_id, Tensor(a!)[] written, Tensor[] read) -> ()")


@dataclasses.dataclass(eq=False)
class LaunchSpec:
    kernel: object  # the user's JITFunction / Autotuner / Heuristics (or Triton's InterpretedFunction)
    grid: object  # a tuple of ints, or a function of the meta-parameters (Triton calls it at launch)
    args: tuple  # per positional argument: ("w", i) / ("r", i): written[i] / read[i]; ("c", value): a constant
    kwargs: dict  # name -> the same
    layouts: dict  # ("w" | "r", i) -> (size, stride) while tracing
    name: str
    written_names: tuple  # the kernel parameters it writes through
    unsure: str | None  # why every tensor argument counts as written, if so

    def describe(self) -> str:
        written = ", ".join(self.written_names) or "nothing"
        why = f" (every tensor argument: {self.unsure})" if self.unsure else ""
        return f"user Triton kernel {self.name}, writes {written}{why}"


_LAUNCHES: list[LaunchSpec] = []
_BY_KEY: dict = {}
_LOCK = threading.Lock()


def register_launch(spec: LaunchSpec, key) -> int:
    """The id of ``spec`` (an equal launch seen before keeps its id, so recompiles do not grow the table)."""
    with _LOCK:
        found = _BY_KEY.get(key)
        if found is not None:
            return found
        _LAUNCHES.append(spec)
        _BY_KEY[key] = len(_LAUNCHES) - 1
        return len(_LAUNCHES) - 1


def launch_spec(launch_id: int) -> LaunchSpec:
    return _LAUNCHES[launch_id]


def _in_layout(t: torch.Tensor, layout) -> torch.Tensor:
    size, stride = layout
    if tuple(t.shape) == tuple(size) and tuple(t.stride()) == tuple(stride):
        return t
    fixed = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    fixed.copy_(t)
    return fixed


def run_launch(launch_id: int, written: list, read: list) -> None:
    """Launch the kernel on real tensors, writing into ``written`` in place (as the user's code does)."""
    spec = _LAUNCHES[launch_id]
    tensors = {("w", i): t for i, t in enumerate(written)}
    tensors.update({("r", i): t for i, t in enumerate(read)})
    given = {slot: _in_layout(t, spec.layouts[slot]) for slot, t in tensors.items()}

    def value(slot):
        return given[slot] if slot[0] in ("w", "r") else slot[1]

    args = [value(s) for s in spec.args]
    kwargs = {k: value(s) for k, s in spec.kwargs.items()}
    spec.kernel[spec.grid](*args, **kwargs)
    for slot, t in tensors.items():
        if slot[0] == "w" and given[slot] is not t:
            t.copy_(given[slot])


def _launch_kernel(launch_id, written, read):
    run_launch(launch_id, written, read)


def _launch_meta(launch_id, written, read):
    return None  # nothing but the writes, which functionalization models


_LIB.impl("triton_launch", _launch_kernel, "CompositeExplicitAutograd")
_LIB.impl("triton_launch", _launch_meta, "Meta")
TRITON_LAUNCH = torch.ops.kiln_user.triton_launch.default
