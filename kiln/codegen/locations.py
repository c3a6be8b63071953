"""Where the user wrote an op, for error messages: ``file:line`` from a stack trace's text, and the marks a
wrapper's messages carry until it is loaded (``<<at:node>>``: filled in from the loading process's graph,
so a graph from the warm cache names this process's lines). No sympy here: warm loads import it."""
from __future__ import annotations

import re

_LOCATION_MARK = re.compile(r"<<at:([^<>]*)>>")


def location_in_trace(trace) -> str:
    """``file:line`` of the innermost user frame of a stack trace's text ("" for none)."""
    if not trace:
        return ""
    m = re.findall(r'File "([^"]+)", line (\d+)', trace)
    if m:
        path, line = m[-1]
        return f"{path}:{line}"
    return str(trace).strip().splitlines()[-1][:120]


def resolve_locations(text: str, locations: dict) -> str:
    """``text`` with each ``<<at:name>>`` mark replaced by `` at file:line`` (nothing where unknown)."""
    if "<<at:" not in text:
        return text
    return _LOCATION_MARK.sub(lambda m: f" at {locations[m.group(1)]}" if locations.get(m.group(1)) else "", text)
