"""dataclasses.replace and dataclasses.asdict, answered by kiln (the dataclasses module is a skipped file).

replace(obj, **changes) follows CPython 3.11/3.12's: every field of the class's `__dataclass_fields__`
(ClassVar pseudo-fields skipped) that `__init__` takes and `changes` lacks is read from obj, and the
class is called again with them (its `__init__` and `__post_init__` traced as for any construction);
init=False fields named in changes and InitVars without a default are CPython's ValueErrors. The fields
come from the class, which kiln knows exactly (guarded by type for an object from the frame). Python
3.13's `__replace__` protocol is not modelled: the call breaks there.

asdict is a Python version traced in the library's place (capture/polyfills.py: `dataclass_asdict`).
"""
from __future__ import annotations

import dataclasses
import sys

from kiln.capture.values.base import Value, unsupported


def replace_handler(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from kiln.capture.values.exceptions import raise_traced
    from kiln.capture.values.objects import ClassValue

    if sys.version_info >= (3, 13):
        unsupported("dataclasses.replace on Python 3.13+ (the __replace__ protocol) is not modelled")
    if len(args) != 1:
        unsupported(f"dataclasses.replace() with {len(args)} positional arguments")
    obj = args[0]
    try:
        cls = obj.python_type()
    except Exception:
        unsupported(f"dataclasses.replace() of {obj}, whose type kiln does not know")
    if isinstance(obj, ClassValue) or not isinstance(cls, type) or not hasattr(cls, "__dataclass_fields__"):
        raise_traced(TypeError, "replace() should be called on dataclass instances")
    changes = dict(kwargs)
    for f in getattr(cls, "__dataclass_fields__").values():
        kind = getattr(f, "_field_type", None)
        if kind is getattr(dataclasses, "_FIELD_CLASSVAR", object()):
            continue
        if not f.init:
            if f.name in changes:
                raise_traced(ValueError, f"field {f.name} is declared with init=False, it cannot be specified with "
                                         f"replace()")
            continue
        if f.name not in changes:
            if kind is getattr(dataclasses, "_FIELD_INITVAR", object()) and f.default is dataclasses.MISSING:
                raise_traced(ValueError, f"InitVar {f.name!r} must be specified with replace()")
            changes[f.name] = tx.getattr(obj, f.name)
    return ClassValue(cls).call(tx, [], changes)


LIBRARY_HANDLERS = {dataclasses.replace: replace_handler}
