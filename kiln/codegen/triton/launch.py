"""Launch configurations for generated Triton kernels: heuristics, optional autotuning, launching.

A config is (XBLOCK, RBLOCK, num_warps); the grid is ``ceil(xnumel / XBLOCK)`` programs. Kernels
big enough for the choice to matter get a few candidates; on a GPU the first call times each and
keeps the fastest, and the choice is saved beside the kernel source (``<source>.tune.json``) so a
warm process does not time again. Under the interpreter the first candidate is used.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile

TUNE_MIN_ELEMENTS = 1 << 20  # kernels touching fewer elements than this use the heuristic config


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    XBLOCK: int
    RBLOCK: int  # 0 for pointwise kernels (no second axis)
    num_warps: int

    def kwargs(self) -> dict:
        out = {"XBLOCK": self.XBLOCK, "num_warps": self.num_warps}
        if self.RBLOCK:
            out["RBLOCK"] = self.RBLOCK
        return out

    def as_list(self) -> list[int]:
        return [self.XBLOCK, self.RBLOCK, self.num_warps]


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _clamp(v, lo, hi):
    return max(lo, min(hi, v))


def candidate_configs(kernel, max_block: int = 0) -> list[LaunchConfig]:
    """Configs to try for ``kernel``, the heuristic's pick first. ``max_block`` (> 0) caps XBLOCK and a
    looped kernel's RBLOCK (tests use it to exercise masks and loops with small shapes)."""
    cap = max_block or (1 << 30)
    x = kernel.xnumel
    if kernel.style == "pointwise":
        xb = min(1024, _pow2(x), cap)
        configs = [LaunchConfig(xb, 0, _clamp(xb // 256, 1, 4))]
        if x >= TUNE_MIN_ELEMENTS and not max_block:
            configs += [LaunchConfig(2048, 0, 8), LaunchConfig(512, 0, 4)]
        return configs
    r = kernel.rnumel
    if kernel.style == "persistent":
        rb = _pow2(r)
        xb = min(_clamp(2048 // rb, 1, 256), _pow2(x), cap)
        configs = [LaunchConfig(xb, rb, _clamp(xb * rb // 256, 1, 8))]
        if x * r >= TUNE_MIN_ELEMENTS and not max_block:
            for xb2 in (xb // 2, xb * 2):
                if 1 <= xb2 <= _pow2(x) and xb2 * rb <= 16384:
                    configs.append(LaunchConfig(xb2, rb, _clamp(xb2 * rb // 256, 1, 8)))
        return configs
    rb = min(2048, _pow2(r), cap)
    configs = [LaunchConfig(1, rb, _clamp(rb // 256, 1, 8))]
    if x * r >= TUNE_MIN_ELEMENTS and not max_block:
        configs += [LaunchConfig(1, 1024, 4), LaunchConfig(min(8, _pow2(x)), 512, 8)]
    return list(dict.fromkeys(configs))


class Launcher:
    """Calls one kernel with buffers: ``launcher(*tensors)`` in the kernel's parameter order."""

    def __init__(self, fn, kernel, configs: list[LaunchConfig], tune_path: str | None):
        self.fn, self.kernel, self.configs, self.tune_path = fn, kernel, configs, tune_path
        self.config: LaunchConfig | None = configs[0] if len(configs) == 1 or tune_path is None else None
        if self.config is None:
            self.config = _saved_choice(tune_path, kernel.name, configs)
        self._bind()

    def _bind(self):
        if self.config is not None:
            xb = self.config.XBLOCK
            self.grid = ((self.kernel.xnumel + xb - 1) // xb,)
            self.launch = self.fn[self.grid]
            self.meta = self.config.kwargs()

    def __call__(self, *args):
        if self.config is None:
            self.config = self._autotune(args)
            self._bind()
        if self.grid[0] == 0:
            return
        self.launch(*args, **self.meta)

    def _autotune(self, args) -> LaunchConfig:
        from triton.testing import do_bench

        timings = []
        for cfg in self.configs:
            grid = ((self.kernel.xnumel + cfg.XBLOCK - 1) // cfg.XBLOCK,)
            launch, meta = self.fn[grid], cfg.kwargs()
            try:
                ms = do_bench(lambda: launch(*args, **meta), warmup=5, rep=25)
            except Exception:  # a config that does not compile (too many registers) is skipped
                continue
            timings.append((ms, cfg))
        best = min(timings, key=lambda t: t[0])[1] if timings else self.configs[0]
        _save_choice(self.tune_path, self.kernel.name, best)
        return best


def _saved_choice(path: str, name: str, configs) -> LaunchConfig | None:
    try:
        with open(path) as f:
            saved = json.load(f).get(name)
    except (OSError, ValueError):
        return None
    if saved is None:
        return None
    cfg = LaunchConfig(*saved)
    return cfg if cfg in configs else None


def _save_choice(path: str, name: str, cfg: LaunchConfig) -> None:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    data[name] = cfg.as_list()
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(suffix=".json", dir=directory)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
