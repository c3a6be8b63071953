"""GPU speed of the scan, sort, scatter and gather families (benchmarks/gpu.py --sections families).

The same families as benchmarks/cpu.py's scan/sort/scatter/gather cases, at sizes a GPU user runs,
in float32 and bfloat16, each against eager and torch.compile: median milliseconds (interleaved
rounds, calls back to back, as gpu.py's kernel rows), GB/s (the bytes a kernel must move: inputs
read once, outputs written once; for gathers only the rows they pick) and that bandwidth as a share
of the device's measured copy bandwidth, and the ratios eager/kiln and torch.compile/kiln (above 1:
kiln is faster).

    python benchmarks/gpu.py --sections families --backends eager,torch.compile,kiln
    python benchmarks/gpu.py --sections families --families scan,sort --family-dtypes bf16

The case builders take a device and a size ("full", "quick", "tiny"), so tests build every case on
the CPU at the tiny size and check kiln's result (tests/bench/test_gpu_families.py).
"""
from __future__ import annotations

import time

import torch

FAMILIES = ("scan", "sort", "scatter", "gather")
SAME_WITHIN = 0.01  # ratios this close to 1 are reported as level (sorts run the same ATen kernel as eager)

# size -> (scan rows, scan cols), (sort rows, sort cols, topk k), (table rows, width, scattered rows),
#         (vocab, embedding dim, indices)
SIZES = {
    "full": ((8192, 8192), (4096, 32768, 16), (1 << 20, 64, 1 << 20), (50257, 768, 16384)),
    "quick": ((2048, 2048), (1024, 8192, 16), (1 << 16, 64, 1 << 16), (50257, 768, 4096)),
    "tiny": ((6, 40), (5, 33, 3), (50, 4, 70), (30, 8, 25)),
}


def _size(dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


def _random(device, dtype, seed: int):
    """(r, ri): r(*shape) normal values of ``dtype``, ri(high, *shape) int64 positions below ``high``."""
    g = torch.Generator(device=device).manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, device=device, dtype=dtype, generator=g)

    def ri(high, *shape):
        return torch.randint(0, high, shape, device=device, generator=g)

    return r, ri


def scan_cases(device, dtype, size="full"):
    (rows, cols), e, n = SIZES[size][0], _size(dtype), SIZES[size][0][0] * SIZES[size][0][1]
    r, _ = _random(device, dtype, 0)

    def x():
        return r(rows, cols)

    shape = f"{rows}x{cols}"
    return [
        ("cumsum_rows", f"cumsum dim 1 {shape}", lambda t: torch.cumsum(t, 1), [x()], 2 * n * e),
        ("cumsum_cols", f"cumsum dim 0 {shape}", lambda t: torch.cumsum(t, 0), [x()], 2 * n * e),
        ("cumsum_fused", f"cumsum(relu(x)*2)+1 {shape}", lambda t: torch.cumsum(torch.relu(t) * 2, 1) + 1, [x()], 2 * n * e),
        ("cummax_rows", f"cummax dim 1 {shape} (+indices)", lambda t: torch.cummax(t, 1), [x()], 2 * n * e + 8 * n),
    ]


def sort_cases(device, dtype, size="full"):
    rows, cols, k = SIZES[size][1]
    e, n = _size(dtype), rows * cols
    r, _ = _random(device, dtype, 1)

    def x():
        return r(rows, cols)

    shape = f"{rows}x{cols}"
    # stable sort: the indices of equal values are defined (bfloat16 rows have many ties); topk's
    # values only, for the same reason
    return [
        ("sort_rows", f"sort dim 1 {shape} stable (+indices)", lambda t: torch.sort(t, dim=1, stable=True), [x()],
         2 * n * e + 8 * n),
        ("topk_rows", f"topk k={k} dim 1 {shape} values", lambda t: torch.topk(t, k, 1).values, [x()], n * e + rows * k * e),
    ]


def scatter_cases(device, dtype, size="full"):
    table, width, scattered = SIZES[size][2]
    vocab, dim, tokens = SIZES[size][3]
    e = _size(dtype)
    r, ri = _random(device, dtype, 2)

    def scatter_add_rows(x, index, src):
        return x.scatter_add(0, index.unsqueeze(1).expand(-1, x.shape[1]), src)

    def embedding_backward(grad, index):
        return torch.ops.aten.embedding_dense_backward.default(grad, index, vocab, -1, False)

    moved = table * width * e * 2 + scattered * width * e + scattered * 8  # table read+written, rows in, indices
    return [
        ("scatter_add_rows", f"scatter_add {scattered}x{width} rows into {table}x{width}", scatter_add_rows,
         [r(table, width), ri(table, scattered), r(scattered, width)], moved),
        ("index_add_rows", f"index_add {scattered // 4}x{width} rows into {table}x{width}",
         lambda x, i, s: x.index_add(0, i, s), [r(table, width), ri(table, scattered // 4), r(scattered // 4, width)],
         table * width * e * 2 + (scattered // 4) * (width * e + 8)),
        ("embedding_backward", f"embedding backward {tokens}x{dim} into {vocab}x{dim}", embedding_backward,
         [r(tokens, dim), ri(vocab, tokens)], vocab * dim * e + tokens * (dim * e + 8)),
    ]


def gather_cases(device, dtype, size="full"):
    vocab, dim, tokens = SIZES[size][3]
    rows, cols = SIZES[size][0]
    e = _size(dtype)
    r, ri = _random(device, dtype, 3)
    picked = tokens * (2 * dim * e + 8)  # the rows read, written, and their indices
    half = rows * (cols // 2)
    return [
        ("index_select", f"index_select {tokens} of {vocab}x{dim}", lambda w, i: w.index_select(0, i),
         [r(vocab, dim), ri(vocab, tokens)], picked),
        ("embedding", f"embedding {tokens} tokens of {vocab}x{dim}", lambda i, w: torch.nn.functional.embedding(i, w),
         [ri(vocab, 4, tokens // 4), r(vocab, dim)], picked),
        ("gather_rows", f"gather dim 1 {rows}x{cols} -> {rows}x{cols // 2}", lambda x, i: torch.gather(x, 1, i),
         [r(rows, cols), ri(cols, rows, cols // 2)], half * (2 * e + 8)),
    ]


BUILDERS = {"scan": scan_cases, "sort": sort_cases, "scatter": scatter_cases, "gather": gather_cases}


def family_cases(device="cuda", dtypes=(torch.float32, torch.bfloat16), size="full", families=FAMILIES):
    """[(family, case name, description, fn, args, bytes moved)] of the selected families and dtypes."""
    out = []
    for family in families:
        for dtype in dtypes:
            for name, what, fn, args, nbytes in BUILDERS[family](device, dtype, size):
                short = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}[dtype]
                out.append((family, f"{name} {short}", f"{what} {short}", fn, args, nbytes))
    return out


def _reference64(fn, args):
    """float64 outputs of ``fn`` (None where the op does not run in float64, e.g. an integer output)."""
    try:
        with torch.no_grad():
            return fn(*[a.double() if a.is_floating_point() else a for a in args])
    except Exception:  # noqa: BLE001 -- compare with eager instead
        return None


def run_families(bench_backends, backends, copy_gbs: float, size="full", families=FAMILIES,
                 dtypes=(torch.float32, torch.bfloat16), device="cuda", gpu_time: bool = True) -> list[dict]:
    """Time every case with ``bench_backends`` (gpu.py's), print a row per case as it finishes and a
    table of GB/s, copy-bandwidth shares and ratios at the end; returns the JSON rows."""
    rows = []
    print(f"\nscan/sort/scatter/gather families ({size} sizes; ms median, GB/s (share of copy {copy_gbs:.0f} GB/s))")
    for family, name, what, fn, args, nbytes in family_cases(device, dtypes, size, families):
        t0 = time.perf_counter()
        ref64 = _reference64(fn, args)
        res = bench_backends(fn, args, backends=backends, ref64=ref64, pipelined=True, gpu_time=gpu_time)
        del ref64
        for r in res.values():
            if "ms" in r:
                r["GBs"] = nbytes / r["ms"] / 1e6
                r["copy_share"] = r["GBs"] / copy_gbs
            if r.get("gpu_ms"):
                r["gpu_GBs"] = nbytes / r["gpu_ms"] / 1e6
                r["gpu_copy_share"] = r["gpu_GBs"] / copy_gbs
        row = {"family": family, "case": name, "what": what, "bytes": nbytes, "results": res,
               "seconds": time.perf_counter() - t0}
        rows.append(row)
        print(format_row(row, backends), flush=True)
        for b, r in res.items():
            if "error" in r or not r.get("matches_eager", True):
                print(f"    {b}: {r.get('error') or 'differs: ' + str(r.get('error_vs_reference'))}"[:300])
    print(summary(rows, backends))
    return rows


def _ratio(res, over: str, under: str = "kiln", key: str = "ms"):
    a, b = res.get(over, {}).get(key), res.get(under, {}).get(key)
    return a / b if a and b else None


def format_row(row, backends) -> str:
    cells = []
    for b in backends:
        r = row["results"].get(b, {})
        if "ms" not in r:
            cells.append(f"{'ERR' if b in row['results'] else '-':>26}")
            continue
        mark = "" if r.get("matches_eager", True) else "!"
        cells.append(f"{r['ms']:8.3f}{mark} {r['GBs']:7.0f} ({r['copy_share']:4.0%})".rjust(26))
    ratios = [_ratio(row["results"], b) for b in backends if b != "kiln"]
    text = " ".join(f"{v:5.2f}x" if v else "    -" for v in ratios)
    return f"{row['case']:<26} " + " ".join(cells) + f"  {text}  ({row['seconds']:.0f}s)"


def summary(rows, backends) -> str:
    head = f"{'case':<26} " + " ".join(f"{b + ' ms GB/s (copy%)':>26}" for b in backends)
    head += "  " + " ".join(f"{b[:5] + '/kiln':>10}" for b in backends if b != "kiln")
    lines = ["", head] + [format_row(r, backends) for r in rows]
    lines += _slower_lines(rows, "ms", "in wall time per call, host overhead included")
    if any(r["results"].get(b, {}).get("gpu_ms") for r in rows for b in backends):
        lines += ["", "GPU time per call (profiler: the kernels' own time)", f"{'case':<26} "
                  + " ".join(f"{b + ' ms GB/s (copy%)':>26}" for b in backends)]
        for row in rows:
            cells = []
            for b in backends:
                r = row["results"].get(b, {})
                cells.append(f"{r['gpu_ms']:8.3f} {r['gpu_GBs']:7.0f} ({r['gpu_copy_share']:4.0%})".rjust(26)
                             if r.get("gpu_ms") else f"{'-':>26}")
            ratios = [_ratio(row["results"], b, key="gpu_ms") for b in backends if b != "kiln"]
            lines.append(f"{row['case']:<26} " + " ".join(cells) + "  "
                         + " ".join(f"{v:5.2f}x" if v else "    -" for v in ratios))
        lines += _slower_lines(rows, "gpu_ms", "in GPU time")
    return "\n".join(lines)


def _slower_lines(rows, key: str, how: str) -> list[str]:
    ratios = {r["case"]: _ratio(r["results"], "eager", key=key) or 1 for r in rows}
    slower = [c for c, v in ratios.items() if v < 1 - SAME_WITHIN]
    same = [c for c, v in ratios.items() if 1 - SAME_WITHIN <= v < 1]
    lines = [f"kiln slower than eager by more than {SAME_WITHIN:.0%} {how}: {', '.join(slower) if slower else 'none'}"]
    if same:
        lines.append(f"level with eager within {SAME_WITHIN:.0%} {how} (the same library kernel, or noise): "
                     + ", ".join(same))
    return lines
