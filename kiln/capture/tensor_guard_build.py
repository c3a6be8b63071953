"""Builds and loads ``_tensor_guard.cpp``: tensor guards that read the TensorImpl instead of Python
attributes (about 300 ns a tensor down to tens of ns; a model's parameters are checked on every call).

It compiles against torch's C++ headers, which kiln's install does not (``pip install`` builds only
``_eval_frame.c``), so it is built here, at run time: once per torch, Python and compiler, into
``<cache_dir>/guards/``, by a background thread started with the first ``kiln.compile`` (about 15 s of
one core; the process goes on meanwhile, its guards reading attributes as before). A library already
built is loaded at once. Until it is loaded, or if it cannot be built (no compiler, no headers), every
guard is checked through the attributes: the same answers, only slower. ``status()`` says which.

Several processes starting together build it once: the first takes a lock file; the others wait for
the library to appear. A library that does not load (truncated, corrupted) is removed and built again.
A build that failed leaves ``<library>.failed`` with the compiler's output, and is not tried again for
that key (delete the file to retry).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

import torch

from kiln.capture import hook

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_tensor_guard.cpp")
LOCK_STALE_SECONDS = 300  # a lock older than this was left by a process that died while building

_lock = threading.Lock()
_started = False
_done = threading.Event()
_status = "not started"
_capsule = None


def _after_fork_in_child() -> None:
    """A child forked during a build has no build thread: it starts over at its next ``kiln.compile``
    (loading the library the parent's build leaves, or waiting for it behind the lock), instead of
    staying "building" for good (``wait()`` without a timeout hung)."""
    global _lock, _started, _done, _status
    _lock = threading.Lock()
    if _status == "building":
        _started, _done, _status = False, threading.Event(), "not started"


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def status() -> str:
    """What the tensor guards read: "loaded <path>", "building", "failed: <why>", "not started"."""
    return _status


def wait(timeout: float | None = None) -> bool:
    """Wait until the library is loaded or has failed; True when loaded (tests and benchmarks)."""
    _done.wait(timeout)
    return _status.startswith("loaded")


def ensure(options) -> None:
    """Load the library, or start building it in the background; once per process, returns at once
    (loading a built library takes about a millisecond)."""
    global _started
    with _lock:
        if _started or not hook.available():
            return
        _started = True
    try:
        path = library_path(options)
    except Exception as exc:  # noqa: BLE001 -- no headers or no key: the attribute reads stay
        _finish(f"failed: {type(exc).__name__}: {exc}")
        return
    if os.path.exists(path) and _load(path):
        return
    _remove_leftovers(os.path.dirname(path))
    _set_status("building")
    threading.Thread(target=_build_and_load, args=(path, options.cpp_compiler), daemon=True,
                     name="kiln-tensor-guard-build").start()


def library_path(options) -> str:
    with open(SOURCE, "rb") as f:
        source = f.read()
    key = hashlib.sha256(b"\0".join([
        source, torch.__version__.encode(), os.path.dirname(torch.__file__).encode(), sys.version.encode(),
        options.cpp_compiler.encode(), str(torch._C._GLIBCXX_USE_CXX11_ABI).encode(),
    ])).hexdigest()[:24]
    return os.path.join(options.cache_dir, "guards", f"_tensor_guard_{key}.so")


def _command(compiler: str, output: str) -> list[str]:
    torch_dir = os.path.dirname(torch.__file__)
    includes = [os.path.join(torch_dir, "include"), os.path.join(torch_dir, "include", "torch", "csrc", "api", "include"),
                sysconfig.get_paths()["include"]]
    lib = os.path.join(torch_dir, "lib")
    return [compiler, "-O2", "-std=c++17", "-fPIC", "-shared", "-w",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            *[f"-I{d}" for d in includes], SOURCE, "-o", output,
            f"-L{lib}", f"-Wl,-rpath,{lib}", "-lc10", "-ltorch_cpu", "-ltorch_python"]


def _build_and_load(path: str, compiler: str) -> None:
    try:
        if os.path.exists(path + ".failed"):
            _finish(f"failed: an earlier build failed (see {path}.failed; delete it to try again)")
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not _take_lock(path + ".lock"):  # another process builds it: wait for its library
            deadline = time.monotonic() + LOCK_STALE_SECONDS
            while time.monotonic() < deadline and not os.path.exists(path) and not _stale(path + ".lock") \
                    and os.path.exists(path + ".lock"):
                time.sleep(0.5)
            if os.path.exists(path) and _load(path):
                return
            if not _take_lock(path + ".lock"):
                _finish("failed: another process holds the build lock")
                return
        try:
            error = _build(path, compiler)
        finally:
            _remove(path + ".lock")
        if error is not None:
            _finish(f"failed: {error}")
        elif not _load(path):
            _finish("failed: the library built does not load")
    except Exception as exc:  # noqa: BLE001 -- a background thread: the attribute reads stay
        _finish(f"failed: {type(exc).__name__}: {exc}")


# The build runs as a process of its own session, which compiles, renames the library into place and
# removes the lock itself: a process that exits before the build ends (a short script) leaves a finished
# library behind, not a stray compiler and a temporary file.
# The compiler runs at the lowest priority: it shares the machine with the program, whose OpenMP threads
# (ATen's, kiln's C++ kernels) wait for each other at every barrier, so one core taken by the compiler
# made a small machine's training steps 20 times slower until the build ended (2 cores, 5 s). Its own
# session is its own scheduling group on Linux (autogroup), where nice alone does not lower its share:
# the group's niceness is set too.
_BUILD_SCRIPT = """tmp=$1; out=$2; lock=$3; log=$4; shift 4
echo $$ > "$lock"
(echo 19 > /proc/$$/autogroup) 2> /dev/null
if command -v nice > /dev/null 2>&1; then set -- nice -n 19 "$@"; fi
if "$@" 2> "$log"; then mv -f "$tmp" "$out"; rm -f "$log"; rc=0
else rc=$?; rm -f "$tmp"; mv -f "$log" "$out.failed"; fi
rm -f "$lock"
exit $rc"""


def _build(path: str, compiler: str) -> str | None:
    """Compile the library to ``path`` (renamed into place when whole); the error, or None. A failure
    leaves the compiler's output in ``<path>.failed``."""
    tmp, log = f"{path}.{os.getpid()}.tmp.so", f"{path}.{os.getpid()}.log"
    try:
        proc = subprocess.Popen(["sh", "-c", _BUILD_SCRIPT, "sh", tmp, path, path + ".lock", log,
                                 *_command(compiler, tmp)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        rc = proc.wait(timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _write(path + ".failed", str(exc))
        return f"the compiler could not run: {exc}"
    if rc != 0:
        return f"the compiler exited with {rc} (output in {path}.failed)"
    return None


def _remove_leftovers(directory: str) -> None:
    """Temporary files of builds whose process was killed (older than the stale-lock limit)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    now = time.time()
    for name in names:
        if name.endswith((".tmp.so", ".log")) or (name.startswith("tmp") and name.endswith(".so")):
            full = os.path.join(directory, name)
            try:
                if now - os.path.getmtime(full) > LOCK_STALE_SECONDS:
                    os.unlink(full)
            except OSError:
                pass


def capsule():
    """The loaded library's checks (what ``hook.set_tensor_guard`` was given), or None."""
    return _capsule


def _load(path: str) -> bool:
    """Load the library at ``path`` and hand its checks to the hook; a library that does not load is
    removed (the caller builds it again)."""
    global _capsule
    try:
        loader = importlib.machinery.ExtensionFileLoader("_tensor_guard", path)
        spec = importlib.util.spec_from_file_location("_tensor_guard", path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        checks = module.init((torch.Tensor, torch.nn.Parameter))
        hook.set_tensor_guard(checks)
    except Exception:  # noqa: BLE001 -- truncated, corrupted or built for another torch: rebuilt
        _remove(path)
        return False
    _capsule = checks
    _finish(f"loaded {path}")
    return True


def _take_lock(lock: str, again: bool = True) -> bool:
    """Create ``lock`` holding this process's id; False when another live process holds it."""
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        if again and _stale(lock):
            _remove(lock)
            return _take_lock(lock, again=False)
        return False
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


def _stale(lock: str) -> bool:
    """The lock's process is gone (it exited while building), or the lock is too old to trust."""
    try:
        if time.time() - os.path.getmtime(lock) > LOCK_STALE_SECONDS:
            return True
        with open(lock) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return False  # (being written right now)
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    started = _process_start(pid)  # a process that started after the lock was written took a dead builder's pid
    return started is not None and started > os.path.getmtime(lock) + 1


def _process_start(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch; Linux's /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # (field 22, starttime, after the name)
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _write(path: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _set_status(text: str) -> None:
    global _status
    _status = text


def _finish(text: str) -> None:
    _set_status(text)
    _done.set()
