"""The report of an op sweep (benchmarks/op_sweep.py): counts, failures, kiln's use of ATen kernels, timing."""
from __future__ import annotations

import collections
import json
import re
import sys

STATUSES = ("pass", "mismatch", "error", "fallback", "timeout", "skip")
TORCH_BACKEND = {"kiln": "inductor", "aot_eager": "aot_eager"}


# what makes two --json files parts of one sweep (files from before an option existed get its default)
SWEEP_SETTINGS = {"backend": "aot_eager", "frontend": "fx", "device": "cpu", "dtype": "float32", "grad": False,
                  "torch": True, "strict_torch": False, "max_samples": 8}


def settings_of(saved_args: dict) -> dict:
    return {k: saved_args.get(k, default) for k, default in SWEEP_SETTINGS.items()}


def load_reports(paths: list[str]) -> tuple[dict, dict, list[str]]:
    """The merged results of --json files (shards of one sweep), their settings, and what is missing."""
    results: dict = {}
    settings, notes, shards = None, [], collections.defaultdict(set)
    for path in paths:
        with open(path) as f:
            saved = json.load(f)
        these = settings_of(saved["args"])
        if settings is None:
            settings = these
        elif these != settings:
            diff = ", ".join(f"{k} {settings[k]!r} vs {these[k]!r}" for k in these if these[k] != settings[k])
            sys.exit(f"op_sweep: {path} is not from the same sweep as {paths[0]} ({diff})")
        results.update(saved["results"])
        index, count = saved["args"].get("shard") or (0, 1)
        shards[count].add(index)
        if not saved.get("complete", True):
            left = [k for k in saved.get("selected", []) if k not in saved["results"]]
            notes.append(f"{path} was cut off: {len(left)} of its {len(saved['selected'])} ops not run "
                         f"(rerun its command with --resume)")
    for count, indices in sorted(shards.items()):
        if count > 1 and len(indices) < count:
            notes.append(f"shards of /{count} missing: {', '.join(str(i) for i in sorted(set(range(count)) - indices))}")
    return results, settings, notes


def report(done: dict, settings: dict) -> str:
    with_torch, backend = settings["torch"], settings["backend"]
    torch_name = f"torch.compile(backend={TORCH_BACKEND[backend]!r})"
    what = f"{settings['device']} {settings['dtype']}" + (", outputs and input gradients" if settings["grad"] else "")
    lines = [f"kiln backend {backend!r} vs {torch_name}, {what}, {len(done)} ops"]
    counts = {name: collections.Counter(r.get(name, "-") for r in done.values()) for name in ("kiln", "torch")}
    lines.append(f"{'':8s}" + "".join(f"{s:>10s}" for s in STATUSES))
    for name in ("kiln", "torch") if with_torch else ("kiln",):
        lines.append(f"{name:8s}" + "".join(f"{counts[name][s]:10d}" for s in STATUSES))
    if with_torch:
        torch_pass = {k for k, r in done.items() if r.get("torch") == "pass"}
        both = {k for k in torch_pass if done[k].get("kiln") == "pass"}
        share = 100.0 * len(both) / max(len(torch_pass), 1)
        lines.append(f"kiln passes {len(both)} of the {len(torch_pass)} ops torch passes ({share:.1f}%)")
        sound = {k for k in torch_pass if done[k].get("kiln") in ("pass", "fallback")}
        lines.append(f"counting kiln's fallbacks (ATen's results): "
                     f"{len(sound)} of {len(torch_pass)} ({100.0 * len(sound) / max(len(torch_pass), 1):.1f}%)")
        lines.append(f"kiln passes {len(({k for k, r in done.items() if r.get('kiln') == 'pass'}) - torch_pass)} ops that torch does not")
    if backend == "kiln":
        lines += _codegen_report(done)
    mismatches = sorted(k for k, r in done.items() if r.get("kiln") == "mismatch")
    lines.append(f"kiln mismatches (wrong results; each is a bug) ({len(mismatches)}):")
    for k in mismatches:
        lines.append(f"  {k:40s} {done[k].get('kiln_why', '')[:150]}")
    failing = sorted(k for k, r in done.items() if r.get("kiln") not in ("pass", "skip", "mismatch")
                     and (not with_torch or r.get("torch") == "pass"))
    lines.append(f"other kiln failures{' where torch passes' if with_torch else ''} ({len(failing)}):")
    for k in failing:
        lines.append(f"  {k:40s} {done[k]['kiln']:9s} {done[k].get('kiln_why', '')[:150]}")
    return "\n".join(lines + _timing_report(done))


def _timing_report(done: dict) -> list[str]:
    timed = {k: r["seconds"] for k, r in done.items() if "seconds" in r}
    if not timed:
        return []
    slowest = sorted(timed, key=timed.get, reverse=True)[:8]
    return [f"time in ops: {sum(timed.values()):.0f} worker-seconds, {sum(timed.values()) / len(timed):.1f}s per op; "
            f"slowest: " + ", ".join(f"{k} {timed[k]:.0f}s" for k in slowest)]
# ATen calls that are library calls by nature, not missing lowerings: BLAS, convolution, FFT, LAPACK-style
# linear algebra, random numbers from ATen's generator, fused attention, sort, and users' own kernels.
# The Inductor baseline counts these as "no fallback" (Inductor calls the same libraries), so
# the report does too, and prints the strict count (no ATen call at all) beside it.
LIBRARY_REASONS = ("matmul (BLAS)", "convolution (library kernel)", "sort (library kernel)",
                   "fused attention (library kernel)", "random op (ATen's generator)", "(the user's kernel)")
_LIBRARY_OP_WORDS = re.compile(
    r"^aten\.(_fft_\w+|fft_\w+|_linalg_(svd|eigh|det|slogdet|solve_ex|check_errors)|linalg_(inv_ex|pinv|qr|lu_factor_ex|lu_solve|lu|"
    r"cholesky_ex|eig|eigvals|ldl_factor_ex|ldl_solve|householder_product|matrix_exp|solve_triangular|lstsq)|"
    r"cholesky|cholesky_inverse|cholesky_solve|triangular_solve|lu_unpack|ormqr|geqrf|"
    r"rand|randn|rand_like|randn_like|randint|randint_like|randperm|normal|normal_|bernoulli|bernoulli_|uniform|"
    r"uniform_|exponential|exponential_|cauchy|cauchy_|geometric|geometric_|log_normal|log_normal_|multinomial|"
    r"native_dropout|rrelu_with_noise(_functional)?|"
    # by name too, so that Inductor's extern kernels ("aten.mm.out: ExternKernelOut") sort like kiln's
    r"mm|bmm|addmm|baddbmm|addmv|addbmm|mv|dot|_int_mm|convolution|_convolution|convolution_backward|"
    r"sort|topk|_scaled_dot_product_\w+|_flash_attention_\w+|_efficient_attention_\w+)\.|"
    r"^(mkldnn|mkl|onednn)\.")


def is_library_call(extern: str) -> bool:
    """``extern`` ("op: reason", as the sweep records it) is a library call by nature, not a fallback."""
    op, _, reason = extern.partition(": ")
    if op.split(".")[0] not in ("aten", "prims", ""):  # a custom op (torch.library): the user's kernel
        return True
    return any(word in reason for word in LIBRARY_REASONS) or bool(_LIBRARY_OP_WORDS.match(op + "."))


def _codegen_report(done: dict) -> list[str]:
    """How the ops kiln passes ran: entirely in generated kernels, with library calls (BLAS, FFT, LAPACK,
    ATen's random generator), or with ATen fallbacks for ops that have no lowering."""
    passed = {k: r for k, r in done.items() if r.get("kiln") == "pass"}
    fallbacks = {k: [e for e in r.get("externs", []) if not is_library_call(e)] for k, r in passed.items()}
    generated = sorted(k for k, r in passed.items() if not r.get("externs") and r.get("kernels", 0) > 0)
    no_kernels = sorted(k for k, r in passed.items() if not r.get("externs") and not r.get("kernels", 0))
    library = sorted(k for k, r in passed.items() if r.get("externs") and not fallbacks[k])
    with_fallback = sorted(k for k in passed if fallbacks[k])
    lines = [f"of the {len(passed)} ops kiln passes: {len(generated)} ran fully in generated kernels, "
             f"{len(no_kernels)} needed no kernel (views/aliases of inputs), {len(library)} used library calls "
             f"(BLAS, convolution, FFT, LAPACK, ATen's random generator, sort) and no other ATen kernel, "
             f"{len(with_fallback)} used an ATen fallback (an op without a lowering)",
             f"no ATen fallback, library calls counted as none (the issue's Inductor baseline): "
             f"{len(generated) + len(no_kernels) + len(library)}; strictly no ATen call: "
             f"{len(generated) + len(no_kernels)}; with an ATen fallback: {len(with_fallback)}"]
    lines += side_by_side(done)
    lines += _extern_counts(done, "ATen fallbacks inside generated code (op: reason -> number of swept ops using it):",
                            lambda e: not is_library_call(e), 60)
    lines += _extern_counts(done, "library calls (not fallbacks):", is_library_call, 20)
    return lines


def _extern_counts(done: dict, title: str, keep, most: int, status="kiln", key="externs") -> list[str]:
    by_op: collections.Counter = collections.Counter()
    for r in done.values():
        if r.get(status) == "pass":
            for e in r.get(key, []):
                if keep(e):
                    by_op[e] += 1
    if not by_op:
        return []
    return [title] + [f"  {n:4d}  {e[:140]}" for e, n in by_op.most_common(most)]


HOW_RAN = ("no ATen fallback (generated code or library calls)", "with an ATen fallback", "graph break / no graph")


def how_kiln_ran(r: dict) -> str:
    """One of HOW_RAN for an op kiln got right (pass or fallback), "" otherwise."""
    if r.get("kiln") == "fallback":
        return HOW_RAN[2]
    if r.get("kiln") != "pass":
        return ""
    return HOW_RAN[1] if any(not is_library_call(e) for e in r.get("externs", [])) else HOW_RAN[0]


def how_inductor_ran(r: dict) -> str:
    """One of HOW_RAN for an op torch.compile got right, by op_sweep_inductor's records ("" without them)."""
    if "torch_externs" not in r or r.get("torch") not in ("pass", "fallback"):
        return ""
    if r.get("torch") == "fallback" or r.get("torch_no_graph", 0):
        return HOW_RAN[2]
    return HOW_RAN[1] if any(not is_library_call(e) for e in r["torch_externs"]) else HOW_RAN[0]


def side_by_side(done: dict) -> list[str]:
    """How each compiler ran the ops it got right, in the issue's table: Inductor's column beside kiln's."""
    kiln = collections.Counter(how_kiln_ran(r) for r in done.values())
    recorded = any("torch_externs" in r for r in done.values())
    inductor = collections.Counter(how_inductor_ran(r) for r in done.values())
    lines = [f"how the ops each compiler got right ran{'' if recorded else ' (no Inductor records in this file)'}:",
             f"  {'':52s}{'Inductor':>10s}{'kiln':>10s}"]
    for row in HOW_RAN:
        lines.append(f"  {row:52s}{inductor[row] if recorded else '-':>10}{kiln[row]:>10d}")
    if recorded:
        lines += _extern_counts(done, "Inductor's ATen fallbacks (op: Inductor's kernel -> number of swept ops using it):",
                                lambda e: not is_library_call(e), 40, status="torch", key="torch_externs")
    return lines
