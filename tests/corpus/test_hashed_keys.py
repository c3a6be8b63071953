"""Objects whose class defines __hash__/__eq__ as dict keys and set members: CPython calls __hash__ once
per operation and __eq__ only against a stored key of equal hash (identity first, a subclass's
reflected __eq__ first); kiln traces the same calls in the same order, or breaks the graph where the
order depends on the hash table's history (several stored keys of one hash)."""
import torch

from .harness import check, dynamo_bug


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class LKey:
    def __init__(self, name, log, h=None):
        self.name, self.log, self.h = name, log, h

    def __hash__(self):
        self.log.append(f"hash {self.name}")
        return hash(self.name) if self.h is None else self.h

    def __eq__(self, other):
        self.log.append(f"eq {self.name}")
        if not isinstance(other, LKey):
            return NotImplemented
        return self.name.lower() == other.name.lower()


class SubKey(LKey):
    def __eq__(self, other):
        self.log.append(f"sub-eq {self.name}")
        return isinstance(other, LKey) and self.name.upper() == other.name.upper()

    __hash__ = LKey.__hash__


def test_dict_lookup_calls_hash_then_eq_against_equal_hash_only():
    def fn(x):
        log = []
        d = {LKey("a", log): x, LKey("b", log): x * 2}
        out = d[LKey("b", log)] + d.get(LKey("zz", log), x)
        d[LKey("A", log, h=hash("a"))] = x * 5  # equal to "a": keeps the first key object, new value
        first = next(iter(d))
        return out, d[LKey("a", log)], len(d), first.name, "b" in [k.name for k in d], log

    check(fn, _t(3), dynamo_graphs=0)  # dynamo: a user __hash__ key makes it run the frame eagerly


def test_identity_is_checked_before_eq():
    def fn(x):
        log = []
        k = LKey("a", log)
        d = {k: x}
        return d[k] + 1, k in d, log  # no __eq__ call: the same object

    check(fn, _t(3))


@dynamo_bug("wrong result: the subclass's reflected __eq__ is not tried first in a dict lookup")
def test_subclass_reflected_eq_runs_first():
    def fn(x):
        log = []
        d = {LKey("q", log): x}
        hit = SubKey("Q", log, h=hash("q")) in d
        return x + hit, log

    check(fn, _t(3))


@dynamo_bug("wrong result for a set of objects with __hash__/__eq__")
def test_set_members_with_hash_and_eq():
    def fn(x):
        log = []
        s = {LKey("a", log), LKey("b", log), LKey("A", log, h=hash("a"))}
        s.add(LKey("c", log))
        s.discard(LKey("b", log))
        return x * len(s), LKey("c", log) in s, LKey("b", log) in s, sorted(k.name for k in s), log

    check(fn, _t(3))


def test_set_of_a_list_adds_its_members_one_by_one():
    # set(list) / frozenset(iterator) of such objects broke the graph ("its class defines __hash__/__eq__"),
    # and the set then reached the resume function, which runs eagerly (a new user's case; dynamo: 1 graph)
    def fn(x):
        log = []
        keys = [LKey("a", log), LKey("b", log), LKey("A", log, h=hash("a")), LKey("c", log)]
        s, f = set(keys), frozenset(iter(keys))
        return x * len(s), sorted(k.name for k in s), [k.name for k in f], type(f).__name__, LKey("b", log) in f, log

    check(fn, _t(3), breaks=0)


@dynamo_bug("wrong result: dict.update with equal (not identical) user keys adds a second key")
def test_dict_update_and_merge_use_kept_hashes():
    def fn(x):
        log = []
        a = {LKey("a", log): x}
        b = {LKey("A", log, h=hash("a")): x * 2, LKey("z", log): x * 3}
        a.update(b)  # no __hash__ calls: b's keys keep their hashes; __eq__ against "a"
        merged = b | {LKey("q", log): x}
        return [a[k] for k in a], len(merged), log

    check(fn, _t(3))


def test_several_keys_of_one_hash_run_as_python_and_stay_right():
    def fn(x):
        log = []
        d = {LKey("a", log, h=1): x, LKey("b", log, h=1): x * 2}
        out = x + 1
        return out + d[LKey("B", log, h=1)], log

    # the lookup cannot run traced, and the dict cannot be rebuilt for it (that would hash again): the
    # frame runs eagerly (kiln hands the backend the graph before the break, then finds no break possible)
    check(fn, _t(3), graphs=(0, 1), dynamo_graphs=0)


@dynamo_bug("wrong result: d.pop(user-hashed key) after an insert")
def test_pop_of_an_empty_dict_does_not_hash():
    def fn(x):
        log = []
        d = {}
        missing = d.pop(LKey("a", log), -1)  # _PyDict_Pop: an empty dict answers at once
        d[LKey("b", log)] = x
        return x + missing, d.pop(LKey("b", log), 0), log

    check(fn, _t(3))


_LOG = []


class _FK:
    def __init__(self, name, h):
        self.name, self.h = name, h

    def __hash__(self):
        _LOG.append("h" + self.name)
        return self.h

    def __eq__(self, other):
        _LOG.append("e" + self.name)
        return isinstance(other, _FK) and other.name.lower() == self.name.lower()


class _FK2(_FK):
    def __eq__(self, other):
        _LOG.append("E" + self.name)
        return isinstance(other, _FK) and other.name.upper() == self.name.upper()

    __hash__ = _FK.__hash__


def _random_program(rng) -> str:
    lines = ["def fn(x):", "    out = []", "    d = {}", "    s = set()"]
    for i in range(rng.randint(1, 6)):
        name = rng.choice("aAbBc")
        h = rng.choice([1, 2, 3, hash(name.lower())])
        key = f"{rng.choice(['_FK', '_FK', '_FK2'])}({name!r}, {h})"
        lines.append(rng.choice([
            f"    d[{key}] = x * {i}", f"    out.append(d.get({key}, {i}))", f"    out.append({key} in d)",
            f"    out.append(d.pop({key}, -1))", f"    out.append(d.setdefault({key}, {i}))", f"    s.add({key})",
            f"    out.append({key} in s)", f"    s.discard({key})", f"    d[{name!r}] = {i}"]))
    lines.append("    return x + 1, [o.sum().item() if isinstance(o, torch.Tensor) else o for o in out], len(d), "
                 "len(s), [getattr(k, 'name', k) for k in d]")
    return "\n".join(lines)


@dynamo_bug("wrong results and __hash__/__eq__ call sequences for user-hashed keys")
def test_random_dict_and_set_programs_call_hash_and_eq_as_cpython():
    """Random inserts/lookups/pops of keys with colliding hashes: the same results and the same sequence
    of __hash__/__eq__ calls as eager (graph breaks allowed where the order cannot be modelled)."""
    import random

    from .harness import CountingBackend, compile_fn, reset

    for seed in range(40):
        namespace = {"_FK": _FK, "_FK2": _FK2, "torch": torch}
        exec(_random_program(random.Random(seed)), namespace)
        fn = namespace["fn"]
        _LOG.clear()
        expected, expected_log = fn(torch.ones(1)), list(_LOG)
        reset()
        _LOG.clear()
        got = compile_fn(fn, CountingBackend())(torch.ones(1))
        assert (got[1:], list(_LOG)) == (expected[1:], expected_log), _random_program(random.Random(seed))
