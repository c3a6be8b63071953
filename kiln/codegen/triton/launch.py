"""Launch configurations for generated Triton kernels: heuristics, optional autotuning, launching.

A config is (XBLOCK, RBLOCK, num_warps), plus YBLOCK for tiled kernels; the grid is
``ceil(xnumel / XBLOCK)`` programs, times ``ceil(ynumel / YBLOCK)`` for tiled kernels. Kernels
big enough for the choice to matter get a few candidates; on a GPU the first call times each and
keeps the fastest, and the choice is saved beside the kernel source (``<source>.tune.json``) so a
warm process does not time again. Under the interpreter the first candidate is used.

A choice is shared by every kernel with the same code: within a graph through its ``leader`` (the
first launcher of that code), across the graphs of one process through ``SHARED_CHOICES`` (keyed by
the kernel's code: a model's repeated blocks compiled as separate graphs, as FSDP and per-block
compilation do, tune once, not once per block), and across processes through the tune file.

Launching: the first launch of a kernel goes through Triton's ``JITFunction`` (which compiles or loads
the binary: tens of microseconds of Python per call); it returns the ``CompiledKernel``, and later
launches call that kernel's C launcher directly with the precomputed grid and the current stream
(``FastLaunch``). The interpreter, and profiling hooks registered with Triton, keep the slow path.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import tempfile

from kiln.codegen.triton.bench import time_each
from kiln.debug.stats import stats

TUNE_MIN_ELEMENTS = 1 << 20
INT32_LIMIT = 1 << 31  # size arguments below this are passed as i32 (Triton's type for the first call's values)
# a size-generic kernel runs 32-bit indices where every bound is below this: the margin covers the
# block overhang past the last element (a program's lanes up to XBLOCK * RBLOCK beyond it)
INDEX32_SAFE = (1 << 31) - (1 << 24)
ALIGNMENT = 16  # Triton specializes pointer arguments on this alignment  # kernels touching fewer elements than this use the heuristic config


# Compile options of every generated kernel. Kernels that check loaded indices are built with
# ``debug=True`` (their ``@jit`` line) for their device asserts; Triton's debug mode would also check every
# 8-32 bit integer add/sub/mul for overflow, which kiln's kernels use on purpose (hashes, wrapping casts).
COMPILE_OPTIONS = {"sanitize_overflow": False}


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    XBLOCK: int
    RBLOCK: int  # 0 for pointwise kernels (no second axis)
    num_warps: int
    YBLOCK: int = 0  # tiled kernels: the tile's size along its y loop

    def kwargs(self) -> dict:
        """The launch's keyword arguments: block sizes, then compile options (``COMPILE_OPTIONS``)."""
        out = {"XBLOCK": self.XBLOCK, "num_warps": self.num_warps}
        if self.RBLOCK:
            out["RBLOCK"] = self.RBLOCK
        if self.YBLOCK:
            out["YBLOCK"] = self.YBLOCK
        return out | COMPILE_OPTIONS

    def constexprs(self) -> tuple[int, ...]:
        """The block sizes in the kernel's parameter order (XBLOCK, then RBLOCK or YBLOCK)."""
        return (self.XBLOCK,) + ((self.RBLOCK,) if self.RBLOCK else ()) + ((self.YBLOCK,) if self.YBLOCK else ())

    def as_list(self) -> list[int]:
        return [self.XBLOCK, self.RBLOCK, self.num_warps] + ([self.YBLOCK] if self.YBLOCK else [])


class SharedChoices:
    """Tuning choices made in this process, by a key of the kernel's code (``build._body_key``, with the
    candidates it was timed among): a launcher with no choice of its own looks here before it times.

    The choice is read at the first call, not when the launcher is built: the graphs of a model's
    blocks are all built before the first backward kernel runs."""

    def __init__(self):
        self._chosen: dict = {}

    def get(self, key):
        return self._chosen.get(key) if key is not None else None

    def put(self, key, choice) -> None:
        if key is not None:
            self._chosen.setdefault(key, choice)

    def clear(self) -> None:
        self._chosen.clear()


SHARED_CHOICES = SharedChoices()


def grid(kernel, cfg: LaunchConfig) -> tuple[int]:
    """The number of programs (a 1-D grid: a tiled kernel finds its tile from its program id)."""
    n = (kernel.xnumel + cfg.XBLOCK - 1) // cfg.XBLOCK
    if cfg.YBLOCK:
        n *= (kernel.ynumel + cfg.YBLOCK - 1) // cfg.YBLOCK
    return (n,)


def _programs(xnumel: int, ynumel: int, cfg: LaunchConfig) -> int:
    """The grid of a size-generic kernel at these sizes (a tiled one: its x blocks times its y blocks)."""
    n = (xnumel + cfg.XBLOCK - 1) // cfg.XBLOCK
    return n * ((ynumel + cfg.YBLOCK - 1) // cfg.YBLOCK) if cfg.YBLOCK else n


def _numel_function(symbols, expr):
    """A Python function of the size symbols' values computing the size expression ``expr``."""
    from kiln.codegen.common import print_index_py

    names = [str(s) for s in symbols]
    return eval(f"lambda {', '.join(names)}: {print_index_py(expr)}")  # noqa: S307 -- our own expression


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _clamp(v, lo, hi):
    return max(lo, min(hi, v))


def candidate_configs(kernel, max_block: int = 0) -> list[LaunchConfig]:
    """Configs to try for ``kernel``, the heuristic's pick first. ``max_block`` (> 0) caps XBLOCK and a
    looped kernel's RBLOCK (tests use it to exercise masks and loops with small shapes). Configs whose
    build would take long for a kernel this large are left out or made smaller (``within_build_budget``)."""
    return within_build_budget(kernel, _candidate_configs(kernel, max_block))


# Triton unrolls a kernel's body over the elements each thread holds, so its build time grows with
# statements x elements per thread: a GPT-2 backward kernel of 290 statements (the residual stream's
# gradient through 12 layers: 101 inputs, 37 outputs) took 29 s to build with 64 elements per thread,
# a training graph's build waiting for it. Configs above this product are dropped; the heuristic's
# pick is shrunk below it (memory-bound kernels this large lose little with fewer elements per thread).
BUILD_BUDGET = 3072


def build_cost(kernel) -> int:
    """A kernel's statements (its source lines that are not comments)."""
    source = getattr(kernel, "source", "")  # (stand-ins in tests have none)
    return sum(1 for line in source.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def per_thread(cfg: LaunchConfig) -> int:
    """Elements of the block each thread holds."""
    return max(1, cfg.XBLOCK * max(cfg.RBLOCK, 1) * max(cfg.YBLOCK, 1) // (32 * cfg.num_warps))


def within_build_budget(kernel, configs: list[LaunchConfig]) -> list[LaunchConfig]:
    cost = build_cost(kernel)
    kept = [cfg for cfg in configs if per_thread(cfg) * cost <= BUILD_BUDGET]
    if not configs or configs[0] in kept:
        return kept
    return list(dict.fromkeys([_shrunk(kernel, configs[0], cost)] + kept))


def _shrunk(kernel, cfg: LaunchConfig, cost: int) -> LaunchConfig:
    """``cfg`` with more warps, then smaller blocks, until it fits ``BUILD_BUDGET`` (or nothing is left
    to shrink: a persistent reduction keeps its whole row)."""
    xb, rb, warps, yb = cfg.XBLOCK, cfg.RBLOCK, cfg.num_warps, cfg.YBLOCK
    while per_thread(LaunchConfig(xb, rb, warps, yb)) * cost > BUILD_BUDGET:
        if warps < 8 and xb * max(rb, 1) * max(yb, 1) >= 64 * warps:
            warps *= 2
        elif yb and max(xb, yb) > 16:  # tiled: the longer side (both stay long enough to coalesce)
            xb, yb = (xb // 2, yb) if xb >= yb else (xb, yb // 2)
        elif kernel.style == "looped" and rb > 256:
            rb //= 2
        elif xb > (1 if rb else 128):  # (a pointwise block stays a few warps wide)
            xb //= 2
        elif rb and warps < 16:
            warps *= 2
        else:
            break
    return LaunchConfig(xb, rb, warps, yb)


def _candidate_configs(kernel, max_block: int = 0) -> list[LaunchConfig]:
    cap = max_block or (1 << 30)
    x = kernel.xnumel
    if kernel.style == "tiled" and getattr(kernel, "row_tiles", False):  # long x rows, few of them a tile
        xb = min(1024, _pow2(x), cap)
        yb = min(_clamp(2048 // xb, 1, 64), _pow2(kernel.ynumel), cap)
        configs = [LaunchConfig(xb, 0, _clamp(xb * yb // 256, 1, 8), yb)]
        if x * kernel.ynumel >= TUNE_MIN_ELEMENTS and not max_block:
            configs += [LaunchConfig(2048, 0, 8, 1), LaunchConfig(1024, 0, 8, 4), LaunchConfig(512, 0, 4, 4),
                        LaunchConfig(min(1024, _pow2(x)), 0, 8, 16)]
            # rows whose length is no power of two (768): a block that divides them wastes no lanes, and
            # big tiles keep many rows' loads in flight (a gather's row load waits for its index load)
            exact = x & -x
            if 128 <= exact < _pow2(x):
                configs += [LaunchConfig(exact, 0, 4, _clamp(4096 // exact, 1, 64)),
                            LaunchConfig(exact, 0, 8, _clamp(16384 // exact, 1, 64))]
        return list(dict.fromkeys(cfg for cfg in configs if cfg.XBLOCK <= _pow2(x)))
    if kernel.style == "tiled":  # square-ish tiles: each side long enough for coalesced accesses
        xb, yb = min(64, _pow2(x), cap), min(64, _pow2(kernel.ynumel), cap)
        configs = [LaunchConfig(xb, 0, _clamp(xb * yb // 512, 1, 8), yb)]
        if x * kernel.ynumel >= TUNE_MIN_ELEMENTS and not max_block:
            configs += [LaunchConfig(32, 0, 4, 32), LaunchConfig(64, 0, 8, 64), LaunchConfig(128, 0, 4, 32),
                        LaunchConfig(32, 0, 4, 128)]
        return list(dict.fromkeys(configs))
    if kernel.style == "pointwise":
        xb = min(1024, _pow2(x), cap)
        configs = [LaunchConfig(xb, 0, _clamp(xb // 256, 1, 4))]
        if x >= TUNE_MIN_ELEMENTS and not max_block:
            configs += [LaunchConfig(2048, 0, 8), LaunchConfig(512, 0, 4)]
        return configs
    r = kernel.rnumel
    if getattr(kernel, "column", False):
        return _column_configs(kernel, cap, tune=x * r >= TUNE_MIN_ELEMENTS and not max_block)
    if kernel.style == "persistent":
        rb = _pow2(r)
        xb = min(_clamp(2048 // rb, 1, 256), _pow2(x), cap)
        warps = _clamp(xb * rb // 256, 1, 8)
        configs = [LaunchConfig(xb, rb, warps)]
        if x * r >= TUNE_MIN_ELEMENTS and not max_block:
            for xb2 in (xb // 2, xb * 2):
                if 1 <= xb2 <= _pow2(x) and xb2 * rb <= 16384:
                    configs.append(LaunchConfig(xb2, rb, _clamp(xb2 * rb // 256, 1, 8)))
            if xb * rb >= 4096:  # long rows: fewer elements per thread, or fewer warps to synchronize
                configs += [LaunchConfig(xb, rb, 16), LaunchConfig(xb, rb, 4)]
        return list(dict.fromkeys(configs))
    rb = min(2048, _pow2(r), cap)
    configs = [LaunchConfig(1, rb, _clamp(rb // 256, 1, 8))]
    if x * r >= TUNE_MIN_ELEMENTS and not max_block:
        configs += [LaunchConfig(1, 1024, 4), LaunchConfig(min(8, _pow2(x)), 512, 8)]
        if r > 4096:  # long rows: wide blocks and many warps keep more loads in flight per row
            configs += [LaunchConfig(1, 4096, 16), LaunchConfig(1, 2048, 32)]
        if r >= 16384:
            configs += [LaunchConfig(1, 8192, 16), LaunchConfig(1, 8192, 32)]
    return list(dict.fromkeys(configs))


def _column_configs(kernel, cap: int, tune: bool) -> list[LaunchConfig]:
    """A row kernel reading along its outer loop (``kernel.column_reads``): blocks of many neighbouring
    rows (XBLOCK, coalesced: Triton orders the block's threads along the contiguous dimension) and few
    inner elements; a persistent kernel holds its whole inner space (RBLOCK), so fewer rows fit."""
    x, r = kernel.xnumel, kernel.rnumel
    xs = _pow2(x)
    if kernel.style == "persistent":
        rb = _pow2(r)
        xb = min(_clamp(16384 // rb, 1, 128), xs, cap)
        configs = [LaunchConfig(xb, rb, _clamp(xb * rb // 1024, 2, 8))]
        if tune:
            for xb2 in (xb // 2, xb // 4):
                if xb2 >= 1:
                    configs.append(LaunchConfig(xb2, rb, _clamp(xb2 * rb // 1024, 2, 8)))
        return list(dict.fromkeys(configs))
    xb, rb = min(64, xs, cap), min(16, _pow2(r), cap)
    configs = [LaunchConfig(xb, rb, 4)]
    if tune:
        configs += [LaunchConfig(min(128, xs), 8, 4), LaunchConfig(min(32, xs), 32, 4), LaunchConfig(min(128, xs), 32, 8)]
    return list(dict.fromkeys(configs))


class Launcher:
    """Calls one kernel with buffers: ``launcher(*tensors)`` in the kernel's parameter order.

    A size-generic kernel (``kernel.size_args``: the last arguments are the size symbols' values) has
    its grid computed per call, and its block sizes chosen per size bucket: the powers of two at or
    above its xnumel and rnumel. Each bucket's config is the heuristic's pick at the bucket's sizes (or,
    where the static kernel would be timed, the fastest of the candidates on the bucket's first call),
    kept with its fast launch."""

    def __init__(self, fn, kernel, configs: list[LaunchConfig], tune_path: str | None, fast_launch: bool = True,
                 leader: "Launcher | None" = None, max_block: int = 0, share_key: str | None = None):
        self.fn, self.kernel, self.configs, self.tune_path = fn, kernel, configs, tune_path
        self.fast_launch = fast_launch
        self.leader = leader  # an identical kernel earlier in the graph (same binary): its tuning is taken
        self.share_key = share_key  # the key of this kernel's code in SHARED_CHOICES (None: not shared)
        self.max_block = max_block
        self.config: LaunchConfig | None = configs[0] if len(configs) == 1 or tune_path is None else None
        if getattr(kernel, "size_args", None):
            self._bind_sized()
            return
        if self.config is None:
            self.config = _saved_choice(tune_path, kernel.name, configs)
        self._bind()

    fast = None  # the FastLaunch bound after the first launch, when Triton gave a compiled kernel

    numel = None  # size-generic kernels: sizes -> xnumel, the grid computed per call

    def _bind(self):
        if self.config is not None:
            self.grid = grid(self.kernel, self.config)
            self.launch = self.fn[self.grid]
            self.meta = self.config.kwargs()
            self.constexprs = self.config.constexprs()

    def _bind_sized(self):
        k = self.kernel
        self.numel = _numel_function(k.size_args, k.xnumel_expr)
        from kiln.loopir.sizes import is_symbolic

        self.rnumel = _numel_function(k.size_args, k.rnumel_expr) if is_symbolic(k.rnumel_expr) else None
        y = getattr(k, "ynumel_expr", 1)
        self.ynumel = (_numel_function(k.size_args, y) if is_symbolic(y) else (lambda *_: int(y))) \
            if k.style == "tiled" else None
        self.buckets: dict[tuple, _Bucket] = {}
        # the largest index the kernel computes stays below the largest of these (INDEX64 above 2**31)
        self.index64 = bool(getattr(k, "index_bounds", ()))  # the kernel takes INDEX64 (kernel.py)
        self.bounds = [_numel_function(k.size_args, b) if is_symbolic(b) else (lambda *_, b=int(b): b)
                       for b in getattr(k, "index_bounds", ())]
        # (the size arguments are not specialized (``do_not_specialize``): one binary per config serves
        # every size, launched with the grid of each call; Triton types them i32 when the first call's fit)
        self.sized_fast_launch, self.fast_launch = self.fast_launch, False

    def __call__(self, *args):
        if self.numel is not None:
            self._call_sized(args)
            return
        fast = self.fast
        if fast is not None and fast(args):
            return
        if self.config is None:
            self.config = self._choose(args)
            self._bind()
        if self.grid[0] == 0:
            return
        compiled = self.launch(*args, **self.meta)
        if fast is None and self.fast_launch:
            self.fast = FastLaunch.bind(compiled, self.grid, self.constexprs, args)

    _last_sizes = None  # the sizes of the last call, and its (bucket, programs, sizes fit i32, bucket key)
    _last = None

    def _call_sized(self, args):
        sizes = args[len(args) - len(self.kernel.size_args):]
        if sizes == self._last_sizes:  # (the common case: the same shape as the last call)
            bucket, programs, small, key = self._last
        else:
            n = self.numel(*sizes)
            y = self.ynumel(*sizes) if self.ynumel is not None else 1
            if n <= 0 or y <= 0:
                return
            wide = self.wide(sizes)
            key = (_pow2(n), _pow2(self.rnumel(*sizes)) if self.rnumel is not None else 0, _pow2(y), wide)
            bucket = self.buckets.get(key)
            if bucket is None:
                bucket = self.buckets[key] = self._bucket(key, n, y, args)
            programs = _programs(n, y, bucket.config)
            small = all(-INT32_LIMIT <= s < INT32_LIMIT for s in sizes)  # (values the wrapper computes may be < 0)
            self._last_sizes, self._last = sizes, (bucket, programs, small, key)
        if bucket.fast is not None and small and bucket.fast(args, programs):
            return
        compiled = self.fn[(programs,)](*args, **bucket.meta)
        if bucket.fast is None and self.sized_fast_launch and small:
            bucket.fast = FastLaunch.bind(compiled, (programs,), bucket.config.constexprs() + ((key[3],) if self.index64 else ()), args)

    def wide(self, sizes) -> bool:
        """Whether the kernel needs 64-bit indices (INDEX64) at these values of its size arguments."""
        return any(b(*sizes) >= INDEX32_SAFE for b in self.bounds)

    def _bucket(self, key, n: int, y: int, args) -> "_Bucket":
        at_bucket = dataclasses.replace(self.kernel, xnumel=key[0], rnumel=key[1] or self.kernel.rnumel, ynumel=key[2])
        configs = candidate_configs(at_bucket, self.max_block)
        name = f"{self.kernel.name}@{key[0]}x{key[1]}" + (f"x{key[2]}" if self.ynumel is not None else "")
        extra = {"INDEX64": key[3]} if self.index64 else {}
        if len(configs) == 1 or self.tune_path is None:
            config = configs[0]
        else:
            config = self._shared_or_saved(self._bucket_key(key), name, configs)
            if config is None:
                config = self._time(configs, lambda cfg: (_programs(n, y, cfg),), args, extra)
                _save_choice(self.tune_path, name, config)
            SHARED_CHOICES.put(self._bucket_key(key), config)
        return _Bucket(config, config.kwargs() | extra)

    def _bucket_key(self, key):
        return None if self.share_key is None else (self.share_key, key)

    def _choose(self, args) -> LaunchConfig:
        """The first call's config: the leader's, another graph's for the same code, the tune file's
        (another graph of this module may have saved it since this launcher was built), or timed."""
        leader = self.leader
        if leader is not None and leader.config is not None:
            return leader.config
        best = self._shared_or_saved(self.share_key, self.kernel.name, self.configs)
        if best is None:
            best = self._time(self.configs, lambda cfg: grid(self.kernel, cfg), args)
            _save_choice(self.tune_path, self.kernel.name, best)
        SHARED_CHOICES.put(self.share_key, best)
        return best

    def _shared_or_saved(self, key, name: str, configs) -> LaunchConfig | None:
        shared = SHARED_CHOICES.get(key)
        if shared in configs:
            stats.tuning["shared"] += 1
            return shared
        saved = _saved_choice(self.tune_path, name, configs)
        if saved is not None:
            stats.tuning["saved"] += 1
        return saved

    def _time(self, configs, grid_of, args, extra=None) -> LaunchConfig:
        stats.tuning["timed"] += 1
        with stats.timed("autotune"):
            timings = self._time_configs(configs, grid_of, args, time_each, extra)
        return min(timings, key=lambda t: t[0])[1] if timings else configs[0]

    def _time_configs(self, configs, grid_of, args, time_each, extra=None) -> list:
        """(ms, config) of each config that runs, timed by ``time_each`` (``bench.py``)."""
        # timing runs each config many times: never on the real buffers it writes
        params = getattr(self.kernel, "params", None)
        written = None if params is None else [i for i, (_, kind) in enumerate(params) if kind != "in"]
        args = twin_args(args, written)
        device = next((a.device for a in args if hasattr(a, "device")), None)
        launches = [_launch_of(self.fn[grid_of(cfg)], args, cfg.kwargs() | (extra or {})) for cfg in configs]
        return [(ms, cfg) for ms, cfg in zip(time_each(launches, device), configs) if ms is not None]


def _launch_of(launch, args, meta):
    return lambda: launch(*args, **meta)


def twin_args(args, written=None) -> list:
    """The arguments a kernel is timed on: each tensor the kernel writes (positions ``written``; every
    tensor when None) a copy of its whole storage, viewed with the same offset, sizes and strides. A
    timed kernel runs dozens of times: one that adds into a buffer (atomic scatters, read-modify-write
    stores) would otherwise leave that buffer added into every time (a wrong first result: found with
    scatter_add into 1M x 64 rows on the H100). Buffers it only reads are used as they are (no copy of
    a large embedding table a gather reads)."""
    import torch

    out = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and (written is None or i in written):
            twin = torch.empty(0, dtype=a.dtype, device=a.device)
            twin.set_(a.untyped_storage().clone(), a.storage_offset(), a.size(), a.stride())
            a = twin
        out.append(a)
    return out


@dataclasses.dataclass
class _Bucket:
    """A size-generic kernel's launch for one size bucket."""
    config: LaunchConfig
    meta: dict
    fast: "FastLaunch | None" = None


class FastLaunch:
    """A launch of one compiled kernel that skips Triton's Python dispatch: ``fast(args)`` calls the
    kernel's C launcher with the grid fixed at bind time and the device's current stream, and returns
    True. It returns False (the caller takes Triton's path) while Triton has launch hooks registered,
    and when a pointer that was 16-byte aligned at bind time is not: Triton compiled the kernel for
    aligned pointers and needs another specialization."""

    def __init__(self, c_launch, grid, function, packed_metadata, flags, constexprs, device, get_stream, aligned=()):
        self.head = (grid[0], 1, 1)
        self.aligned = tuple(aligned)  # positions of the tensor arguments Triton specialized as aligned
        self.function, self.packed_metadata, self.flags = function, packed_metadata, flags
        self.constexprs, self.device, self.get_stream = tuple(constexprs), device, get_stream
        self.c_launch = c_launch

    @classmethod
    def bind(cls, compiled, grid, constexprs, args, device=None, get_stream=None):
        """A FastLaunch for what ``JITFunction.run`` returned, or None (the interpreter returns no
        compiled kernel; a kernel that needs scratch memory keeps Triton's launcher)."""
        function = getattr(compiled, "function", None)
        packed = getattr(compiled, "packed_metadata", None)
        if function is None or packed is None:
            return None
        try:
            import torch

            runner = compiled.run
            c_launch = runner.launch
            flags = (runner.launch_cooperative_grid, runner.launch_pdl)
            if getattr(runner, "global_scratch_size", 0) or getattr(runner, "profile_scratch_size", 0):
                return None
            get_stream = get_stream or torch._C._cuda_getCurrentRawStream
            device = torch.cuda.current_device() if device is None else device
        except (ImportError, AttributeError):  # another Triton or torch version: keep Triton's path
            return None
        aligned = [i for i, a in enumerate(args) if not isinstance(a, int) and a.data_ptr() % ALIGNMENT == 0]
        return cls(c_launch, grid, function, packed, flags, constexprs, device, get_stream, aligned)

    def __call__(self, args, programs: int = 0) -> bool:
        """Launch on ``args``; ``programs`` > 0: that many programs (size-generic kernels), else the grid
        fixed at bind time."""
        if _HOOKS_ACTIVE[0]:
            return False
        if self.aligned and not _all_aligned(args, self.aligned):
            return False
        head = (programs, 1, 1) if programs else self.head
        self.c_launch(*head, self.get_stream(self.device), self.function, *self.flags, None, None,
                      self.packed_metadata, None, None, None, *args, *self.constexprs)
        return True


def _has_hooks(chain) -> bool:
    return chain is not None and bool(getattr(chain, "calls", True))


# Whether Triton has launch hooks registered (a profiler's): FastLaunch then declines, so Triton's
# path calls them. Read once per wrapper call (the wrapper's first line calls refresh_launch_hooks),
# not per launch; until the first refresh, assume hooks.
_HOOKS_ACTIVE = [True]


def refresh_launch_hooks(runtime=None) -> None:
    if runtime is None:
        runtime = _triton_runtime()
    if runtime is None:  # another Triton: always take its own path
        _HOOKS_ACTIVE[0] = True
        return
    _HOOKS_ACTIVE[0] = _has_hooks(getattr(runtime, "launch_enter_hook", None)) or \
        _has_hooks(getattr(runtime, "launch_exit_hook", None))


@functools.lru_cache(maxsize=1)
def _triton_runtime():
    """Triton's ``knobs.runtime`` (where launch hooks are registered), or None."""
    try:
        from triton import knobs

        return knobs.runtime
    except (ImportError, AttributeError):
        return None


def _aligned_in_python(args, positions) -> bool:
    return all(args[i].data_ptr() % ALIGNMENT == 0 for i in positions)


def _all_aligned_fn():
    """``all_aligned(args, positions)``: kiln's C check of data pointers, or the same in Python."""
    from kiln.capture import hook

    fn = getattr(hook._C, "all_aligned", None)
    return _aligned_in_python if fn is None else fn


_all_aligned = _all_aligned_fn()


def _saved_raw(path: str, name: str):
    """What was saved under ``name`` in the tune file at ``path`` (None when nothing was)."""
    try:
        with open(path) as f:
            return json.load(f).get(name)
    except (OSError, ValueError, AttributeError):
        return None


def _save_raw(path: str, name: str, value) -> None:
    """Add ``name: value`` to the tune file; a file that cannot be written (a full disk) is left as it
    was: the choice is only not remembered."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data[name] = value
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)  # (kernel files live elsewhere: build.load_kernels)
        fd, tmp = tempfile.mkstemp(suffix=".json", dir=os.path.dirname(path))
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _saved_choice(path: str, name: str, configs) -> LaunchConfig | None:
    saved = _saved_raw(path, name)
    if not isinstance(saved, list):
        return None
    try:
        cfg = LaunchConfig(*saved)
    except (TypeError, ValueError):  # a damaged or older tune file: tuned again
        return None
    return cfg if cfg in configs else None


def _save_choice(path: str, name: str, cfg: LaunchConfig) -> None:
    _save_raw(path, name, cfg.as_list())
