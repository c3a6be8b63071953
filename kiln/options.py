"""One frozen, typed Options object. Environment variables (KILN_*) are read here, once, and nowhere else.

Options travel explicitly through every stage and are part of every cache key.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping


def _env_flag(name: str) -> bool | None:
    """An on/off environment variable (an integer, 0 is off); None when it is not set."""
    raw = os.environ.get(name)
    return None if raw is None or raw == "" else _env_int(name, 0) != 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} must be an integer") from None


def _env_str(name: str) -> str | None:
    raw = os.environ.get(name)
    return raw if raw else None


def _env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw not in choices:
        raise ValueError(f"environment variable {name}={raw!r} must be one of {list(choices)}")
    return raw


MATMUL_CHOICES = ("autotune", "template", "library")
FUSED_OPTIMIZER_CHOICES = ("cpu", "all", "off")


@dataclasses.dataclass(frozen=True)
class Options:
    """Knobs of the compiler. Build with ``Options(...)`` or pass a dict as ``kiln.compile(options=...)``.

    recompile_limit: cache entries per code object before kiln runs that code eagerly (KILN_RECOMPILE_LIMIT).
    debug_dir: directory where each stage dumps its printout (KILN_DEBUG_DIR).
    logs: comma-separated stage names whose printouts go to stderr, e.g. "graph,guards" (KILN_LOGS).
    inline_depth: how deep user-function calls are inlined before the call is left to run as a frame.
    cache_dir: where compiled kernels are kept across processes (KILN_CACHE_DIR; default ~/.cache/kiln).
    cpp_compiler: the C++ compiler for CPU kernels (KILN_CXX; default g++).
    fusion: let the scheduler fuse kernels (turn off to see one kernel per loop nest).
    cpu_codegen: code generator for CPU tensors: "cpp" (C++/OpenMP) or "triton" (Triton kernels run by
        Triton's interpreter; slow, it exists so CI tests the Triton generator) (KILN_CPU_CODEGEN).
    triton_autotune: time a few launch configs of big Triton kernels on the GPU and keep the fastest
        (KILN_TRITON_AUTOTUNE=0 turns it off).
    triton_persistent_max: rows (inner or reduction spaces) up to this many elements are held in
        registers whole; longer ones are looped over in blocks.
    triton_max_block: caps XBLOCK and a looped RBLOCK (0: heuristics decide; tests use small caps).
    triton_fast_launch: after a kernel's first launch through Triton, call its C launcher directly
        (KILN_TRITON_FAST_LAUNCH=0 keeps Triton's launch path for every call).
    cudagraphs: record each CUDA graph's work into CUDA graphs and replay them (set by
        ``kiln.compile(mode="reduce-overhead")``; see ``kiln/codegen/cudagraphs.py``).
    default_cudagraphs: in default mode, the speed race (``choose_faster``) also times a GPU inference
        graph replayed from a CUDA graph and keeps it where it is faster (``kiln/backends/default_graphs.py``;
        KILN_DEFAULT_CUDAGRAPHS=0 turns it off).
    matmul_templates: with Triton kernels, generate a tiled Triton matmul for each 2-D mm/addmm with the
        pointwise ops that consume its result fused into it, and use it where it is faster than the
        library call (cuBLAS) followed by the separate epilogue kernel (set by the "max-autotune"
        modes; KILN_MATMUL_TEMPLATES=1 turns it on; see ``kiln/schedule/templates.py``).
    conv_channels_last: run 2-D convolutions (inference and training graphs) on channels-last inputs and weights
        (``kiln/aot/channels_last.py``; KILN_CONV_CHANNELS_LAST=1 or 0). None (the default): on for graphs
        on CUDA (cuDNN's NHWC kernels; timm resnet50 on an H100: GPU time 4.1 -> 3.3 ms in float32,
        2.7 -> 1.8 ms in bfloat16), off on CPU (not measured there).
    compile_workers: processes that compile a graph's new Triton kernels in parallel before their first
        launch (KILN_COMPILE_WORKERS; 0: Triton compiles each kernel at its first launch, in turn).
    gemm_padding: 16-bit mm/bmm on CUDA whose operands the library would get misaligned (a dimension
        not a multiple of 16 bytes, e.g. GPT-2's 50257-word LM head) are computed on zero-padded operands
        where that is worth it ("auto"; ``kiln/lower/gemm_padding.py``), "always" (every misaligned
        product, any device and dtype: tests) or "off" (KILN_GEMM_PADDING).
    choose_faster: time each inference graph's generated code against the captured graph run by eager
        PyTorch on its first calls and keep the faster (``kiln/backends/choose_faster.py``;
        KILN_CHOOSE_FASTER=0 turns it off: the generated code always runs).
    matmul_choice: how a matmul template's path is picked: "autotune" (time the template's configs
        and the library path on the first call on the GPU, keep the fastest; the interpreter takes
        the template), "template" or "library" (force one path; KILN_MATMUL_CHOICE).
    ddp_split: a graph compiled inside a DistributedDataParallel forward is split at DDP's gradient
        bucket boundaries, so each bucket's all-reduce starts while the rest of the backward runs
        (KILN_DDP_SPLIT; docs/distributed.md).
    distributed_agreement_timeout: seconds ranks wait for each other to agree, graph by graph, that
        every rank compiled it (else all run it eagerly); 0: off, a rank whose compile fails runs that
        graph eagerly alone (KILN_DIST_AGREEMENT_TIMEOUT; kiln/distributed/consistency.py).
    ddp_agreement_timeout: the same agreement, for graphs compiled inside a DistributedDataParallel
        forward or an FSDP2-sharded module's forward (every rank compiles the same graphs there, in
        step); at most half the process group's timeout; 0 (the default until it is checked on NCCL
        GPUs): off (KILN_DDP_AGREEMENT_TIMEOUT).
    warm_cache: keep what the backend made of each captured graph under ``cache_dir`` and reuse it in
        later processes (no tracing, lowering or code generation; docs/caching.md; KILN_WARM_CACHE=0 off).
    fused_optimizer: where ``optimizer.step()`` of Adam/AdamW/SGD runs as kiln's fused step (kiln/optim,
        docs/optimizers.md): "cpu" (default: parameters on the CPU), "all" (also CUDA, where it is not
        yet faster than eager's multi-tensor step) or "off" (KILN_FUSED_OPTIMIZER).
    inplace_stores: a kernel that computes the new value of an input the graph mutates stores it into the
        input's memory where nothing reads the old contents afterwards, instead of the runtime copying
        it back (``kiln/schedule/inplace.py``; KILN_INPLACE_STORES=0 off).
    dynamic_ints: int arguments (and int attributes of arguments) become size-like symbols where
        ``dynamic=`` makes sizes symbols: from the first compile under ``dynamic=True``, once a compile
        sees another value at the same place under ``dynamic=None`` (automatic dynamic, as
        torch.compile's ints); 0, 1 and negative values stay constants (docs/dynamic.md;
        KILN_DYNAMIC_INTS=0: every int value a guarded constant).
    dynamic_floats: float arguments become graph inputs the same way (KILN_DYNAMIC_FLOATS=0 off).
    triton_check_arch: with Triton's interpreter (cpu_codegen "triton"), also compile every graph's kernels
        for this CUDA compute capability (e.g. 90) with Triton's real compiler (each kernel's first launch
        config) and fail the graph, naming every kernel that does not build: on a CPU-only machine, catches
        code the interpreter runs but a GPU build rejects (KILN_TRITON_CHECK_ARCH; 0: off; needs Triton's
        NVIDIA backend; ignored with cpu_codegen "cpp"; ``kiln/codegen/triton/offline.py``).
    """

    recompile_limit: int = 8
    debug_dir: str | None = None
    logs: tuple[str, ...] = ()
    inline_depth: int = 32
    cache_dir: str = os.path.join(os.path.expanduser("~"), ".cache", "kiln")
    cpp_compiler: str = "g++"
    fusion: bool = True
    cpu_codegen: str = "cpp"
    triton_autotune: bool = True
    triton_persistent_max: int = 4096
    triton_max_block: int = 0
    triton_fast_launch: bool = True
    cudagraphs: bool = False
    default_cudagraphs: bool = True
    matmul_templates: bool = False
    matmul_choice: str = "autotune"
    compile_workers: int = 0
    conv_channels_last: bool | None = None
    gemm_padding: str = "auto"
    dynamic_ints: bool = True
    dynamic_floats: bool = True
    choose_faster: bool = True
    ddp_split: bool = True
    distributed_agreement_timeout: float = 0.0
    ddp_agreement_timeout: float = 0.0
    warm_cache: bool = True
    inplace_stores: bool = True
    triton_check_arch: int = 0
    fused_optimizer: str = "cpu"

    def __post_init__(self):
        if self.gemm_padding not in ("auto", "always", "off"):
            raise ValueError(f"Options.gemm_padding must be 'auto', 'always' or 'off', not {self.gemm_padding!r}")
        if self.fused_optimizer not in FUSED_OPTIMIZER_CHOICES:
            raise ValueError(f"Options.fused_optimizer must be one of {FUSED_OPTIMIZER_CHOICES}, not {self.fused_optimizer!r}")
        if self.cpu_codegen not in ("cpp", "triton"):
            raise ValueError(f"Options.cpu_codegen must be 'cpp' or 'triton', not {self.cpu_codegen!r}")
        if self.matmul_choice not in MATMUL_CHOICES:
            raise ValueError(f"Options.matmul_choice must be one of {list(MATMUL_CHOICES)}, not {self.matmul_choice!r}")

    def replace(self, **changes: Any) -> "Options":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_any(cls, value: "Options | Mapping[str, Any] | None") -> "Options":
        base = default_options()
        if value is None:
            return base
        if isinstance(value, Options):
            return value
        if isinstance(value, Mapping):
            valid = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(value) - valid)
            if unknown:
                raise ValueError(
                    f"kiln.compile(options=...): unknown option(s) {unknown}; valid options are {sorted(valid)}"
                )
            return dataclasses.replace(base, **dict(value))
        raise TypeError(f"kiln.compile(options=...) takes a dict or kiln.Options, not {type(value).__name__}")

    def cache_key(self) -> tuple:
        return dataclasses.astuple(self)


def _read_environment() -> Options:
    logs = _env_str("KILN_LOGS")
    return Options(
        recompile_limit=_env_int("KILN_RECOMPILE_LIMIT", 8),
        debug_dir=_env_str("KILN_DEBUG_DIR"),
        logs=tuple(s.strip() for s in logs.split(",") if s.strip()) if logs else (),
        cache_dir=_env_str("KILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kiln"),
        cpp_compiler=_env_str("KILN_CXX") or "g++",
        cpu_codegen=_env_choice("KILN_CPU_CODEGEN", ("cpp", "triton"), "cpp"),
        gemm_padding=_env_choice("KILN_GEMM_PADDING", ("auto", "always", "off"), "auto"),
        triton_autotune=_env_int("KILN_TRITON_AUTOTUNE", 1) != 0,
        triton_fast_launch=_env_int("KILN_TRITON_FAST_LAUNCH", 1) != 0,
        matmul_templates=_env_int("KILN_MATMUL_TEMPLATES", 0) != 0,
        matmul_choice=_env_choice("KILN_MATMUL_CHOICE", MATMUL_CHOICES, "autotune"),
        compile_workers=_env_int("KILN_COMPILE_WORKERS", _default_workers()),
        conv_channels_last=_env_flag("KILN_CONV_CHANNELS_LAST"),
        dynamic_ints=_env_int("KILN_DYNAMIC_INTS", 1) != 0,
        dynamic_floats=_env_int("KILN_DYNAMIC_FLOATS", 1) != 0,
        choose_faster=_env_int("KILN_CHOOSE_FASTER", 1) != 0,
        default_cudagraphs=_env_int("KILN_DEFAULT_CUDAGRAPHS", 1) != 0,
        ddp_split=_env_int("KILN_DDP_SPLIT", 1) != 0,
        distributed_agreement_timeout=float(_env_str("KILN_DIST_AGREEMENT_TIMEOUT") or 0.0),
        ddp_agreement_timeout=float(_env_str("KILN_DDP_AGREEMENT_TIMEOUT") or 0.0),
        warm_cache=_env_int("KILN_WARM_CACHE", 1) != 0,
        inplace_stores=_env_int("KILN_INPLACE_STORES", 1) != 0,
        fused_optimizer=_env_choice("KILN_FUSED_OPTIMIZER", FUSED_OPTIMIZER_CHOICES, "cpu"),
        triton_check_arch=_env_int("KILN_TRITON_CHECK_ARCH", 0),
    )


def _default_workers() -> int:
    return max(1, min(16, (os.cpu_count() or 2) - 1))


_DEFAULT = _read_environment()


def default_options() -> Options:
    """The options given by the environment at import time."""
    return _DEFAULT
