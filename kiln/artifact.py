"""One portable file with what kiln generated for a compiled function or module (docs/caching.md).

    compiled = kiln.compile(model)
    compiled(x)                                  # compile for the shapes and devices you need
    kiln.save(compiled, "model.kiln")            # one file: every graph's generated code and kernels

    # a new process, or another machine with the same CPU/GPU, compiler and versions:
    compiled = kiln.load("model.kiln", model)    # kiln.compile(model) that uses the file's code
    compiled(x)                                  # capture and guards run; nothing is traced or built

The file holds the warm-cache entries (``kiln/backends/warm_cache.py``) of the graphs the compiled
object captured, with the environment they were built for. ``kiln.load`` refuses a file that is
damaged (checksum), of another format, or made with other versions, another machine or other options,
with a warning that says what differs, and kiln then compiles as usual. A graph whose entry does not
match what this process captures (another model, other shapes, dtypes, devices, modes) simply is not
found: it compiles. Capture and guards always run, so the file can never make kiln skip a check.
Like any pickle, load only files you trust.
"""
from __future__ import annotations

import json
import os
import warnings

from kiln.backends.warm_key import environment, options_key
from kiln.lazy import LazyModule

warm_cache = LazyModule("kiln.backends.warm_cache", keep=False)  # (imported by kiln.save / kiln.load: not at import kiln)

ARTIFACT_MAGIC = b"KILN-ARTIFACT-1\n"
ARTIFACT_FORMAT = 1


class ArtifactWarning(UserWarning):
    """kiln.load refused (part of) an artifact; kiln compiles instead."""


def save(compiled, path: str) -> int:
    """Write the generated code of every graph ``compiled`` (what ``kiln.compile`` returned, called at
    least once) has captured to ``path``; returns how many graphs the file holds. Graphs kiln could not
    cache (see ``kiln.stats.warm_cache``) are left out with a warning: a process that loads the file
    compiles them."""
    from kiln.api import config_of

    config = config_of(compiled)
    if config is None:
        raise TypeError(f"kiln.save takes what kiln.compile returned, not a {type(compiled).__name__}")
    graphs = [r.graph for r in config.compiler.records if r.graph is not None]
    if not graphs:
        raise ValueError("kiln.save: nothing was compiled yet; call the compiled function or module first")
    if not config.options.warm_cache:
        raise ValueError("kiln.save needs the whole-graph cache: compile with options={'warm_cache': True} "
                         "(or unset KILN_WARM_CACHE=0)")
    keys = [gm.meta.get("kiln_warm_key") for gm in graphs]
    entries = {k: warm_cache.ENTRIES[k] for k in keys if k is not None and k in warm_cache.ENTRIES}
    if not entries:
        raise ValueError(f"kiln.save: none of the {len(graphs)} graph(s) could be cached "
                         f"(kiln.stats.warm_cache says why: {dict(kiln_stats_warm())})")
    if len(entries) < len(graphs):
        warnings.warn(f"kiln.save: {len(graphs) - len(entries)} of {len(graphs)} graph(s) could not be cached "
                      f"and will compile when the file is loaded ({dict(kiln_stats_warm())})", ArtifactWarning,
                      stacklevel=2)
    places = sorted({(e["target"], e.get("device")) for e in entries.values()}, key=str)
    payload = {"format": ARTIFACT_FORMAT, "entries": entries, "options": options_key(config.options),
               "environment": [(t, d, environment(t, config.options, d)) for t, d in places],
               "tune": _tune_choices(entries.values(), config.options)}
    warm_cache.write_atomically(os.path.abspath(path), warm_cache.encode(payload, ARTIFACT_MAGIC))
    return len(entries)


def _tune_path(source: str, options) -> str:
    from kiln.codegen.triton.runtime import module_path

    return module_path(source, options) + ".tune.json"


def _tune_choices(entries, options) -> dict:
    """Module source -> its tune file's choices (launch configs and matmul paths picked on the GPU)."""
    choices = {}
    for entry in entries:
        if entry["target"] != "triton":
            continue
        for part in entry["graphs"]:
            try:
                with open(_tune_path(part["library_source"], options)) as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                choices[part["library_source"]] = data
    return choices


def _install_tune_choices(choices: dict, options) -> None:
    """Tune files for modules that have none here (one that exists holds this machine's own choices)."""
    for source, data in choices.items():
        path = _tune_path(source, options)
        if not os.path.exists(path):
            try:
                warm_cache.write_atomically(path, json.dumps(data).encode())
            except OSError:
                pass  # (a read-only cache: the first call tunes again)


def kiln_stats_warm():
    from kiln.debug.stats import stats

    return stats.warm_cache


def load(path: str, model, strict: bool = False, **compile_kwargs):
    """``kiln.compile(model, **compile_kwargs)`` that takes the generated code of the graphs it captures
    from the file at ``path`` (written by ``kiln.save``). A file that cannot be used is refused with an
    ``ArtifactWarning`` saying why (``strict=True``: a ValueError), and kiln compiles as usual."""
    import kiln
    from kiln.options import Options

    options = Options.from_any(compile_kwargs.pop("options", None)).replace(warm_cache=True)
    why = _install(path, options)
    if why is not None:
        message = f"kiln.load: {path} is not used: {why}; kiln compiles instead"
        if strict:
            raise ValueError(message)
        warnings.warn(message, ArtifactWarning, stacklevel=2)
    return kiln.compile(model, options=options, **compile_kwargs)


def _install(path: str, options) -> str | None:
    """Make the file's entries available to the warm cache; None, or why the file is refused."""
    try:
        with open(path, "rb") as f:
            payload = warm_cache.decode(f.read(), ARTIFACT_MAGIC)
    except OSError as exc:
        return f"cannot read it ({exc})"
    except Exception as exc:  # noqa: BLE001 -- damaged in any way
        return f"the file is damaged or not a kiln artifact ({exc})"
    if not isinstance(payload, dict) or payload.get("format") != ARTIFACT_FORMAT:
        return "it has another artifact format"
    differences = []
    for target, device, saved in payload["environment"]:
        here = environment(target, options, device)
        differences += [f"{name} {saved.get(name)!r} (here {here.get(name)!r})"
                        for name in sorted(set(saved) | set(here)) if saved.get(name) != here.get(name)]
    if differences:
        return "it was made for another environment: " + "; ".join(differences)
    saved_options, here_options = dict(payload["options"]), dict(options_key(options))
    changed = [f"{k}={saved_options.get(k)!r} (here {here_options.get(k)!r})"
               for k in sorted(set(saved_options) | set(here_options)) if saved_options.get(k) != here_options.get(k)]
    if changed:
        return "it was made with other options: " + ", ".join(changed)
    warm_cache.ENTRIES.update(payload["entries"])
    _install_tune_choices(payload.get("tune", {}), options)
    return None
