"""Building C++ kernels: the system compiler, a content-addressed disk cache, in-process loading.

The cache key is the source text, the flags and the compiler's version, so a second process that
generates the same source loads the cached library and compiles nothing.

Each library has a checksum file beside it (`<lib>.so.sha256`, written after the library is in place).
A library whose checksum is missing or differs (an interrupted or concurrent write, a truncated or
overwritten file), or that the loader refuses, is removed and built again: a bad entry costs one
rebuild, never a failed compile or wrong code.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile

from kiln.debug.stats import stats
from kiln.errors import KernelBuildError

FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fno-math-errno")
_LOADED: dict[str, ctypes.CDLL] = {}


@functools.lru_cache(maxsize=None)
def compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KernelBuildError("C++ kernels", f"{compiler} --version", str(exc), "<none>") from None
    return out.stdout.splitlines()[0] if out.stdout else compiler


@functools.lru_cache(maxsize=None)
def build_flags(compiler: str) -> tuple[str, ...]:
    """FLAGS, plus glibc's vector math library where the compiler finds it (the prelude then declares
    SIMD versions of exp, log, tanh, erf, ... so that loops calling them vectorize)."""
    try:
        out = subprocess.run([compiler, "-print-file-name=libmvec.so"], capture_output=True, text=True, timeout=30)
        found = os.path.isabs(out.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        found = False
    return FLAGS + (("-DKILN_LIBMVEC",) if found else ())


def link_flags(compiler: str) -> tuple[str, ...]:
    return ("-lmvec",) if "-DKILN_LIBMVEC" in build_flags(compiler) else ()


def library_path(source: str, options) -> str:
    flags = build_flags(options.cpp_compiler)
    key = hashlib.sha256("\0".join([source, " ".join(flags), compiler_version(options.cpp_compiler)]).encode()).hexdigest()
    return os.path.join(options.cache_dir, "cpp", key[:2], f"kiln_{key[:40]}.so")


def load_library(source: str, options, what: str = "C++ kernels") -> ctypes.CDLL:
    """Compile ``source`` (or find it in the cache) and load it."""
    path = library_path(source, options)
    lib = _LOADED.get(path)
    if lib is not None:
        return lib
    if _intact(path):
        try:
            lib = ctypes.CDLL(path)
            stats.kernel_cache_hits += 1
        except OSError:
            lib = None  # a library the loader refuses despite its checksum: built again below
    if lib is None:
        _remove(path)
        _compile(source, path, options, what)
        lib = ctypes.CDLL(path)
    _LOADED[path] = lib
    return lib


def install_library(source: str, binary: bytes, options) -> None:
    """Put a library built elsewhere (a warm-cache entry or an artifact, built for this machine: its
    key says so) into the cache for ``source``, unless an intact one is there already."""
    path = library_path(source, options)
    if path in _LOADED or _intact(path):
        return
    _remove(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _write_atomically(path, binary, ".so")
    _write_atomically(path + ".sha256", hashlib.sha256(binary).hexdigest(), ".sha256")


def _checksum(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _intact(path: str) -> bool:
    """Whether the cached library at ``path`` is there and matches the checksum written beside it."""
    try:
        with open(path + ".sha256") as f:
            expected = f.read().strip()
        return bool(expected) and _checksum(path) == expected
    except OSError:
        return False


def _remove(path: str) -> None:
    for stale in (path, path + ".sha256"):
        try:
            os.unlink(stale)
        except OSError:
            pass


def _write_atomically(path: str, text: str | bytes, suffix: str) -> None:
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def _compile(source: str, path: str, options, what: str) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    src_path = path[:-3] + ".cpp"
    _write_atomically(src_path, source, ".cpp")  # another process may be compiling the same file
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=directory)
    os.close(fd)
    cxx = options.cpp_compiler
    cmd = [cxx, *build_flags(cxx), src_path, "-o", tmp, *link_flags(cxx)]
    with stats.timed("cpp_compile"):
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            os.unlink(tmp)
            raise KernelBuildError(what, " ".join(cmd), str(exc), src_path) from None
    if done.returncode != 0:
        os.unlink(tmp)
        raise KernelBuildError(what, " ".join(cmd), done.stderr, src_path)
    digest = _checksum(tmp)
    os.replace(tmp, path)  # atomic: a concurrent process sees the whole library or none
    _write_atomically(path + ".sha256", digest, ".sha256")  # last: until then the entry is not intact
    stats.kernel_compiles += 1
