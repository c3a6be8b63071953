"""Running a matmul template: its launch configs, and the measured choice between the template and the
library path (ATen ``mm``/``addmm``, then the epilogue group's own kernel).

``MatmulChoice(...)(*tensors)`` takes the template kernel's arguments. On its first call on the GPU
(``Options.matmul_choice == "autotune"``) it times every candidate config of the template and the
library path with the real arguments (``bench.time_each``), keeps the fastest, and saves
the choice with the timings beside the kernel source (``<source>.tune.json``, under the kernel's
name) so a warm process does not time again. Under the interpreter it takes the template with the
first config, unless ``matmul_choice == "library"``. Every path writes the same outputs, and nothing
else: the kernels are functional, so timing them repeatedly is harmless.
"""
from __future__ import annotations

import dataclasses
import functools
import json

import torch

from kiln.codegen.triton.launch import COMPILE_OPTIONS, SHARED_CHOICES, FastLaunch, _save_raw, _saved_raw
from kiln.debug.stats import stats

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages), the usual first pick first
STANDARD_CONFIGS = [
    (128, 128, 32, 8, 4, 4), (128, 256, 64, 8, 8, 3), (256, 128, 64, 8, 8, 3), (128, 128, 64, 8, 8, 3),
    (128, 64, 32, 8, 4, 4), (64, 128, 32, 8, 4, 4), (64, 64, 64, 8, 4, 3), (32, 64, 32, 8, 2, 5),
]
SHARED_MEMORY_LIMIT = 200 * 1024  # bytes of operand tiles a config may keep in flight (H100: 227 KiB)


@dataclasses.dataclass(frozen=True)
class MatmulConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    num_warps: int
    num_stages: int

    def constexprs(self, k: int) -> tuple:
        return (self.BLOCK_M, self.BLOCK_N, self.BLOCK_K, self.GROUP_M, k % self.BLOCK_K == 0)

    def kwargs(self, k: int) -> dict:
        names = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K")
        return dict(zip(names, self.constexprs(k)), num_warps=self.num_warps, num_stages=self.num_stages,
                    **COMPILE_OPTIONS)

    def grid(self, m: int, n: int) -> tuple[int]:
        return (-(-m // self.BLOCK_M) * -(-n // self.BLOCK_N),)

    def label(self) -> str:
        return f"{self.BLOCK_M}x{self.BLOCK_N}x{self.BLOCK_K} g{self.GROUP_M} w{self.num_warps} s{self.num_stages}"


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def matmul_configs(m: int, n: int, k: int, itemsize: int, max_block: int = 0) -> list[MatmulConfig]:
    """The standard configs shrunk to the problem (blocks no bigger than the next power of two of a
    dim, at least 16: ``tl.dot``'s minimum), without ones whose operand tiles overflow shared memory.
    ``max_block`` (> 0) caps the blocks (tests use 16 to get several tiles and K steps)."""
    cap = max(16, max_block) if max_block else 1 << 30
    out = []
    for bm, bn, bk, g, w, s in STANDARD_CONFIGS:
        bm, bn, bk = (max(16, min(b, _pow2(d), cap)) for b, d in ((bm, m), (bn, n), (bk, k)))
        if s * (bm * bk + bk * bn) * itemsize > SHARED_MEMORY_LIMIT:
            continue
        w = min(w, max(1, bm * bn // 256))
        out.append(MatmulConfig(bm, bn, bk, g, w, s))
    return list(dict.fromkeys(out))


class LibraryPath:
    """ATen ``mm``/``addmm`` on the operand views, then the epilogue kernel on its result, all from the
    template kernel's arguments."""

    def __init__(self, kernel, epilogue):
        t = kernel.template
        pos = {name: i for i, (name, _) in enumerate(kernel.params)}
        self.a, self.b = self._view(t.a, pos), self._view(t.b, pos)
        self.bias = self._view(t.bias, pos) if t.bias is not None else None
        self.alpha, self.beta = t.alpha, t.beta
        self.out = pos[t.out] if t.store_out else None
        self.epilogue = epilogue  # the epilogue TritonKernel (with its launcher), or None
        self.epilogue_args = [None if name == t.out else pos[name] for name, _ in epilogue.params] if epilogue else []

    @staticmethod
    def _view(v, pos):
        whole = v.is_whole_buffer()
        return pos[v.buffer.name], (None if whole else (tuple(v.size), tuple(v.stride), int(v.offset)))

    @staticmethod
    def _get(spec, args):
        i, view = spec
        t = args[i]
        return t if view is None else t.as_strided(view[0], view[1], t.storage_offset() + view[2])

    def __call__(self, args):
        a, b = self._get(self.a, args), self._get(self.b, args)
        aten = torch.ops.aten
        if self.bias is not None:
            bias = self._get(self.bias, args)
            if self.out is not None:
                res = aten.addmm.out(bias, a, b, beta=self.beta, alpha=self.alpha, out=args[self.out])
            else:
                res = aten.addmm.default(bias, a, b, beta=self.beta, alpha=self.alpha)
        elif self.out is not None:
            res = aten.mm.out(a, b, out=args[self.out])
        else:
            res = aten.mm.default(a, b)
        if self.epilogue is not None:
            self.epilogue.fn(*[res if i is None else args[i] for i in self.epilogue_args])


class TemplatePath:
    """Launches of the template kernel with one config (Triton's path first, then ``FastLaunch``)."""

    def __init__(self, fn, kernel, config: MatmulConfig, fast_launch: bool = True):
        m, n, k = kernel.shape
        self.config, self.fast_launch = config, fast_launch
        self.grid = config.grid(m, n)
        self.launch, self.meta = fn[self.grid], config.kwargs(k)
        self.constexprs = config.constexprs(k)
        self.fast = None

    def __call__(self, args):
        fast = self.fast
        if fast is not None and fast(args):
            return
        compiled = self.launch(*args, **self.meta)
        if fast is None and self.fast_launch:
            self.fast = FastLaunch.bind(compiled, self.grid, self.constexprs, args)


class MatmulChoice:
    """The callable the wrapper calls for a template kernel; see the module docstring."""

    def __init__(self, fn, kernel, epilogue, configs, tune_path: str | None, choice: str = "autotune",
                 interpret: bool = False, fast_launch: bool = True, leader: "MatmulChoice | None" = None,
                 share_key: str | None = None):
        self.fn, self.kernel, self.configs, self.tune_path = fn, kernel, configs, tune_path
        self.choice, self.interpret, self.fast_launch = choice, interpret, fast_launch
        self.leader = leader  # an identical template earlier in the graph: its choice is taken, not re-timed
        self.share_key = share_key  # this template's code (and its epilogue's) in SHARED_CHOICES
        self.library = LibraryPath(kernel, epilogue)
        self.timings: dict[str, float] = {}  # path label -> ms, when this process measured them
        self.picked: str | None = None  # "template <config>" | "library"
        self.run = None
        if choice == "library":
            self._take("library")
        elif interpret or (choice == "template" and len(configs) == 1):
            self._take(configs[0])
        elif tune_path is not None:
            self._load_saved()

    def _take(self, what, note: str = ""):
        stats.matmul_choices["library" if what == "library" else "template"] += 1
        if what == "library":
            self.run, self.picked = self.library, "library"
        else:
            self.run, self.picked = TemplatePath(self.fn, self.kernel, what, self.fast_launch), f"template {what.label()}"
        self.picked += note

    def _load_saved(self) -> bool:
        """Take the choice saved in the tune file under this kernel's name, if there is a usable one."""
        saved = _saved_raw(self.tune_path, self.kernel.name)
        if not isinstance(saved, dict):
            return False
        try:
            self._load(saved)
        except (TypeError, ValueError, AttributeError):  # a damaged tune file: tuned again
            self.run, self.picked, self.timings = None, None, {}
        return self.run is not None

    def _load(self, saved: dict):
        if saved.get("choice") == "library":
            self._take("library", " (saved)")
        elif saved.get("config") is not None and MatmulConfig(*saved["config"]) in self.configs:
            self._take(MatmulConfig(*saved["config"]), " (saved)")
        self.timings = dict(saved.get("ms", {}))

    def __call__(self, *args):
        run = self.run
        if run is None:
            if not (self._follow() or self._shared() or self._saved_since()):
                self._autotune(args)
                SHARED_CHOICES.put(self._key(), {"choice": self.picked, "ms": self.timings,
                                                 "config": None if self.run is self.library else self.run.config})
            run = self.run
        run(args)

    def _follow(self) -> bool:
        """Take the leader's choice, when it has made one (its kernel's binary is this one's too)."""
        leader = self.leader
        if leader is None or leader.picked is None:
            return False
        if leader.run is leader.library:
            self._take("library", f" (as {leader.kernel.name})")
        else:
            self._take(leader.run.config, f" (as {leader.kernel.name})")
        return True

    def _key(self):
        return None if self.share_key is None else (self.share_key, self.choice)

    def _shared(self) -> bool:
        """Take the choice another graph of this process made for the same template (SharedChoices)."""
        shared = SHARED_CHOICES.get(self._key())
        if shared is None or (shared["config"] is not None and shared["config"] not in self.configs):
            return False
        stats.tuning["shared"] += 1
        self._take("library" if shared["config"] is None else shared["config"], " (as timed in another graph)")
        self.timings = dict(shared["ms"])
        return True

    def _saved_since(self) -> bool:
        """Take a choice saved in the tune file since this launcher was built (another graph of the
        same module timed it)."""
        if self.tune_path is None or self.choice == "library" or not self._load_saved():
            return False
        stats.tuning["saved"] += 1
        return True

    def _autotune(self, args) -> None:
        stats.tuning["timed"] += 1
        with stats.timed("autotune"):
            self._autotune_paths(args)

    def _autotune_paths(self, args) -> None:
        from kiln.codegen.triton.bench import time_each

        # (matmul paths only store their output: timing them on it is harmless)
        labels, paths, runs = [], {}, []
        for cfg in self.configs:
            path = TemplatePath(self.fn, self.kernel, cfg, self.fast_launch)  # (its untimed run compiles it
            labels.append(cfg.label())                                       # and binds the fast launch)
            paths[cfg.label()] = cfg
            runs.append(functools.partial(path, args))
        if self.choice == "autotune" or not runs:
            labels.append("library")
            paths["library"] = "library"
            runs.append(functools.partial(self.library, args))
        device = next((a.device for a in args if hasattr(a, "device")), None)
        # a config that does not compile here (registers, shared memory) is skipped (None)
        timings = {label: ms for label, ms in zip(labels, time_each(runs, device)) if ms is not None}
        if not timings:  # no template config compiled here ("template" choice): the library path
            timings = {"library": time_each([functools.partial(self.library, args)], device)[0] or 0.0}
            paths["library"] = "library"
        best = min(timings, key=timings.get)
        self.timings = timings
        self._take(paths[best])
        if self.tune_path is not None:
            cfg = paths[best]
            _save_raw(self.tune_path, self.kernel.name, {
                "choice": "library" if cfg == "library" else "template",
                "config": None if cfg == "library" else list(dataclasses.astuple(cfg)), "ms": timings})

    def explain(self) -> str:
        if self.picked is None:
            return "not chosen yet (on the first call: the template's configs and the library path are timed)"
        text = self.picked
        if self.timings:
            ranked = sorted(self.timings.items(), key=lambda kv: kv[1])
            text += "; measured: " + ", ".join(f"{k} {v * 1000:.1f} us" for k, v in ranked[:4])
            if "library" in self.timings and all(k != "library" for k, _ in ranked[:4]):
                text += f", library {self.timings['library'] * 1000:.1f} us"
        return text


def offline_configs(kernel, max_block: int = 0) -> list[MatmulConfig]:
    m, n, k = kernel.shape
    return matmul_configs(m, n, k, kernel.dtype.itemsize, max_block)
