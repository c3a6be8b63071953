"""Unit tests of stores to classes (values/class_stores.py): what is recorded and how lookups see it, and
the refusals (reasons name the class and why)."""
import types

import pytest
import torch

from kiln.capture.side_effects import SideEffects
from kiln.capture.values.base import ConstantValue
from kiln.capture.values.class_stores import class_has_pending, pending_class_attribute, store_class_attribute
from kiln.capture.values.objects import ClassValue
from kiln.errors import Unsupported


def _tx():
    return types.SimpleNamespace(output=types.SimpleNamespace(side_effects=SideEffects()))


class Base:
    v = 1

    def m(self):
        return 1


class Sub(Base):
    pass


class Mod(torch.nn.Module):
    pass


class WithModuleChild:
    n = 0


class _ModuleChild(WithModuleChild, torch.nn.Module):
    pass


def test_store_recorded_in_the_class_own_dict_and_seen_through_the_mro():
    tx = _tx()
    store_class_attribute(tx, ClassValue(Base), "v", ConstantValue(5))
    assert pending_class_attribute(tx, Base, "v").as_constant() == 5
    assert pending_class_attribute(tx, Sub, "v") is None  # Sub's own dict has no entry
    assert class_has_pending(tx, Sub, "v") and not class_has_pending(tx, Sub, "w")
    (effect,) = list(tx.output.side_effects)
    assert effect.name == "v" and effect.obj.source.value is Base  # replayed as Base.v = 5
    store_class_attribute(tx, ClassValue(Base), "v", ConstantValue(6))  # a later store replaces it
    assert len(tx.output.side_effects) == 1 and pending_class_attribute(tx, Base, "v").as_constant() == 6


@pytest.mark.parametrize("cls, name, value, why", [
    (Base, "__len__", ConstantValue(1), "dunder"),
    (Base, "m", ConstantValue(1), "replaces a function"),
    (Mod, "k", ConstantValue(1), "not a plain Python class"),
    (WithModuleChild, "n", ConstantValue(1), "not a plain Python class"),  # a subclass is an nn.Module
])
def test_refused_stores_name_the_class_and_why(cls, name, value, why):
    with pytest.raises(Unsupported, match=f"{cls.__qualname__}.{name}: .*{why}"):
        store_class_attribute(_tx(), ClassValue(cls), name, value)
