"""How often kiln's graph count on the corpus equals TorchDynamo's, case by case.

    KILN_CORPUS_COUNTS_LOG=/tmp/kiln.jsonl python -m pytest tests/corpus -q -p no:cacheprovider
    KILN_CORPUS_COUNTS_LOG=/tmp/dynamo.jsonl KILN_CORPUS_ENGINE=dynamo python -m pytest tests/corpus -q -p no:cacheprovider
    python benchmarks/corpus_parity.py /tmp/kiln.jsonl /tmp/dynamo.jsonl

Each `check()` of tests/corpus logs its first call's graph count (tests/corpus/harness.py, _log_count);
this joins the two logs by (test id, check number) and prints the share that agree, the cases where
kiln runs the whole frame eagerly (0 graphs) while TorchDynamo makes one graph, and the other differences.
"""
from __future__ import annotations

import collections
import json
import sys


def load(path: str) -> dict:
    out = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            out[(row["test"], row["check"])] = row["graphs"]
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    kiln, dynamo = load(argv[0]), load(argv[1])
    both = sorted(set(kiln) & set(dynamo))
    same = [k for k in both if kiln[k] == dynamo[k]]
    eager_only = [k for k in both if kiln[k] == 0 and dynamo[k] == 1]
    print(f"checks in both runs: {len(both)} (kiln only {len(set(kiln) - set(dynamo))}, "
          f"dynamo only {len(set(dynamo) - set(kiln))})")
    print(f"same graph count as TorchDynamo: {len(same)} ({100 * len(same) / max(1, len(both)):.1f}%)")
    print(f"kiln 0 graphs where TorchDynamo makes 1: {len(eager_only)}")
    for k in eager_only:
        print(f"    {k[0]} (check {k[1]})")
    kinds = collections.Counter("fewer" if kiln[k] < dynamo[k] else "more" for k in both if kiln[k] != dynamo[k])
    print(f"differences: kiln fewer graphs {kinds['fewer']}, kiln more graphs {kinds['more']}")
    for k in both:
        if kiln[k] != dynamo[k] and k not in eager_only:
            print(f"    {k[0]} (check {k[1]}): kiln {kiln[k]}, dynamo {dynamo[k]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
