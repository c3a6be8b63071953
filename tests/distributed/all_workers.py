"""Every CPU scenario of tests/distributed in one pair of processes (one spawn for the whole directory:
starting 2 processes that import torch and kiln costs more than most scenarios)."""
from __future__ import annotations

import traceback

from tests.distributed import collective_workers, consistency_workers, ddp_workers, fsdp_workers

SECTIONS = {
    "ddp": lambda rank, world: ddp_workers.run_scenarios(rank, world, list(ddp_workers.SCENARIOS)),
    "collectives": lambda rank, world: collective_workers.run(rank, world, ["aot_eager", "kiln"]),
    "fsdp": lambda rank, world: fsdp_workers.run_scenarios(rank, world, list(fsdp_workers.SCENARIOS)),
    "consistency": lambda rank, world: consistency_workers.run(rank, world),
}


def run_all(rank, world_size):
    results = {}
    for name, section in SECTIONS.items():
        try:
            results[name] = section(rank, world_size)
        except Exception:  # noqa: BLE001 - the section's tests report it
            results[name] = {"error": traceback.format_exc()}
    return results
