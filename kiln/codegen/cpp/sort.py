"""C++ for a row-sort group (``loopir/sort.py``): the values and/or indices of one sort, topk,
kthvalue, median or mode, with ATen's CPU algorithms so that ties and NaN come out as eager's.

Shape::

    #pragma omp parallel if(...)                      rows in parallel above a work threshold
    {
      std::vector<std::pair<T, int64_t>> row(n);      per thread
      #pragma omp for
      for (xr over rows) {
        a0.. = the row's coordinates
        for (r0 in 0..n) row[r0] = {input at (a.., r0), r0};     the input's body: producers inlined
        <ATen's algorithm on row>
        <stores of the values / indices>
      }
    }
"""
from __future__ import annotations

import sympy
import torch

from kiln.codegen.common import kernel_name, print_index_c
from kiln.codegen.cpp.kernel import PARALLEL_THRESHOLD, CppKernel, KernelContext, kernel_header, pointer_params
from kiln.codegen.cpp.loops import block, csize, loop, omp_if
from kiln.codegen.cpp.ops import CTYPE, CppOps
from kiln.codegen.cpp.scan import cast
from kiln.loopir.handlers import SimplifiedIndices
from kiln.loopir.index import linear_index, var
from kiln.loopir.sizes import hint, is_symbolic, prod, used_size_symbols
from kiln.schedule.scheduler import FusedGroup

# ATen's quick_select_template (aten/src/ATen/native/SortingUtils.h), on the (value, index) pairs
HELPERS = r"""
#ifndef KILN_SORT_HELPERS
#define KILN_SORT_HELPERS
#include <utility>
#include <vector>
template <typename P, typename Gt>
static void kiln_quick_select(std::vector<P>& arr, int64_t k, Gt gt_or_nan) {
  int64_t L = 0, R = (int64_t)arr.size() - 1;
  while (true) {
    if (R <= L) return;
    if (R == L + 1) { if (gt_or_nan(arr[L].first, arr[R].first)) std::swap(arr[L], arr[R]); return; }
    int64_t P_ = L + (R - L) / 2;
    std::swap(arr[P_], arr[L + 1]);
    if (gt_or_nan(arr[L + 1].first, arr[R].first)) std::swap(arr[L + 1], arr[R]);
    if (gt_or_nan(arr[L].first, arr[R].first)) std::swap(arr[L], arr[R]);
    if (gt_or_nan(arr[L + 1].first, arr[L].first)) std::swap(arr[L + 1], arr[L]);
    int64_t i = L + 1, j = R;
    auto piv = arr[L].first;
    while (true) {
      do i++; while (gt_or_nan(piv, arr[i].first));
      do j--; while (gt_or_nan(arr[j].first, piv));
      if (j < i) break;
      std::swap(arr[i], arr[j]);
    }
    std::swap(arr[L], arr[j]);
    if (j <= k) L = i;
    if (j >= k) R = j - 1;
  }
}
#endif
"""


def _comparators(dtype: torch.dtype) -> dict[str, str]:
    """C++ lambdas over pairs ``a``, ``b``: ATen's NaN-aware orders (NaN above every number)."""
    nan = dtype.is_floating_point

    def isnan(v):
        return f"std::isnan({v})" if nan else "false"

    return {
        "asc": f"[](const P& a, const P& b) {{ return (!{isnan('a.first')} && {isnan('b.first')}) || a.first < b.first; }}",
        "desc": f"[](const P& a, const P& b) {{ return ({isnan('a.first')} && !{isnan('b.first')}) || a.first > b.first; }}",
        "gt_or_nan": f"[](T x, T y) {{ return ({isnan('x')} && !{isnan('y')}) || x > y; }}",
        "total": "[](const P& a, const P& b) { return a.first < b.first || (a.first == b.first && a.second < b.second); }",
        "total_nan_last": "[](const P& a, const P& b) { return a.first < b.first || (a.first == b.first && "
                          f"a.second < b.second) || ({isnan('b.first')} && !{isnan('a.first')}); }}",
        "by_value": "[](const P& a, const P& b) { return a.first < b.first; }",
        "isnan": isnan("p.first"),
    }


def _algorithm(spec) -> list[str]:
    """Statements leaving the results in ``row`` (sort, topk) or in ``res_v``/``res_i``."""
    c = _comparators(spec.value_dtype)
    n, k, cn = spec.n, spec.k, csize(spec.n)
    if spec.op == "sort":
        fn = "std::stable_sort" if spec.stable else "std::sort"
        return [f"{fn}(row.begin(), row.end(), {c['desc' if spec.descending else 'asc']});"]
    if spec.op == "topk":  # ATen's topk_impl_loop
        cmp = c["desc" if spec.descending else "asc"]
        partial = [f"std::partial_sort(row.begin(), row.begin() + {k}, row.end(), {cmp});"]
        select = [f"std::nth_element(row.begin(), row.begin() + {k - 1}, row.end(), {cmp});"]
        if spec.sorted:
            select.append(f"std::sort(row.begin(), row.begin() + {k - 1}, {cmp});")
        if is_symbolic(n):  # ATen's choice at run time
            return [f"if ({k * 64} <= {csize(n)})"] + block(partial) + ["else"] + block(select)
        return partial if k * 64 <= n else select
    if spec.op == "kthvalue":
        return [f"kiln_quick_select(row, {k - 1}, {c['gt_or_nan']});",
                f"const T res_v = row[{k - 1}].first;", f"const int64_t res_i = row[{k - 1}].second;"]
    if spec.op == "median":  # the first NaN, else the (n-1)/2-th in (value, index) order
        return [f"auto nth = std::find_if(row.begin(), row.end(), [](const P& p) {{ return {c['isnan']}; }});",
                "if (nth == row.end()) {",
                f"    nth = row.begin() + ({cn} - 1) / 2;",
                f"    std::nth_element(row.begin(), nth, row.end(), {c['total']});",
                "}", "const T res_v = nth->first;", "const int64_t res_i = nth->second;"]
    if spec.op == "nanmedian":  # NaN last; the ((non-NaN count) - 1) / 2-th (C division), as ATen
        return [f"const int64_t nans = std::count_if(row.begin(), row.end(), [](const P& p) {{ return {c['isnan']}; }});",
                f"auto nth = row.begin() + ({cn} - nans - 1) / 2;",
                f"std::nth_element(row.begin(), nth, row.end(), {c['total_nan_last']});",
                "const T res_v = nth->first;", "const int64_t res_i = nth->second;"]
    # mode: ATen's mode kernel: sort by value, the first longest run wins (its last element's index)
    return [f"std::sort(row.begin(), row.end(), {c['by_value']});",
            "T res_v = 0; int64_t res_i = 0, run = 0, best = 0;",
            f"for (int64_t i = 0; i < {cn}; ++i) {{",
            "    run++;",
            f"    if (i == {cn} - 1 || row[i].first != row[i + 1].first) {{",
            "        if (run > best) { res_v = row[i].first; res_i = row[i].second; best = run; }",
            "        run = 0;",
            "    }", "}"]


def _row_coords(spec) -> tuple[list[str], list]:
    """C definitions of the row's coordinates ``a{d}`` from ``xr``, and the input index (``r0`` at dim)."""
    dims = [d for d in range(len(spec.in_size)) if d != spec.dim and spec.in_size[d] != 1]
    lines, index = [], []
    below = 1
    for d in reversed(dims):
        n = spec.in_size[d]
        expr = "xr" if below == 1 else f"(xr / {csize(below)})"
        lines.insert(0, f"const int64_t a{d} = {expr} % {csize(n)};")
        below = below * n
    for d in range(len(spec.in_size)):
        if d == spec.dim:
            index.append(var("r", 0))
        elif spec.in_size[d] == 1:
            index.append(sympy.Integer(0))
        else:
            index.append(sympy.Symbol(f"a{d}", integer=True, nonnegative=True))
    return lines, index


def _stores(ctx, member, in_index) -> list[str]:
    """Stores of one result: a row of ``out_len`` elements (sort, topk) or one per row."""
    node, data = member.node, member.node.data
    spec = data.spec
    ptr = ctx.pointers[node.name]
    j = sympy.Symbol("j", integer=True, nonnegative=True)
    if spec.keeps_dim:
        out = [j if d == spec.dim else e for d, e in enumerate(in_index)]
        value = "row[j].first" if data.which == "values" else "row[j].second"
    else:
        out = [sympy.Integer(0) if d == spec.dim else e for d, e in enumerate(in_index)]
        if not spec.keepdim:
            out = [e for d, e in enumerate(out) if d != spec.dim]
        value = "res_v" if data.which == "values" else "res_i"
    out = out if len(node.size) else []
    src = spec.value_dtype if data.which == "values" else torch.int64
    store = f"{ptr}[{print_index_c(linear_index(out, node.stride))}] = {cast(value, src, node.dtype)};"
    if spec.keeps_dim:
        return [loop("j", spec.out_len())] + block([store])
    return [store]


def generate_sort_kernel(group: FusedGroup, buffers: dict, index: int) -> CppKernel:
    ctx = KernelContext(group, buffers)
    origins = tuple(o for m in group.members for o in m.node.origins if o is not None)
    name = kernel_name("cpp", origins, index)
    spec = group.members[0].node.data.spec
    n = spec.n
    rows = prod([s for d, s in enumerate(spec.in_size) if d != spec.dim])
    coords, in_index = _row_coords(spec)
    ops = CppOps(ctx)
    ranges = {e: spec.in_size[d] for d, e in enumerate(in_index) if isinstance(e, sympy.Symbol)}
    value = spec.body(SimplifiedIndices(ops, ranges), in_index)
    gather = [loop("r0", n)] + block(ops.lines + [f"row[r0] = P({value}, r0);"])
    stores = [line for m in group.members for line in _stores(ctx, m, in_index)]
    per_row = coords + gather + _algorithm(spec) + stores
    T = CTYPE[spec.value_dtype]
    parallel = hint(rows) > 1 and hint(rows * n) >= PARALLEL_THRESHOLD
    if parallel and is_symbolic(rows * n):  # the region decides at run time
        parallel = f"{csize(rows * n)} >= {PARALLEL_THRESHOLD}"
    region = ([f"std::vector<P> row({csize(n)});"] + (["#pragma omp for"] if parallel else [])
              + [loop("xr", rows)] + block(per_row))
    body = [f"using T = {T};", "using P = std::pair<T, int64_t>;"]
    body += ([f"#pragma omp parallel{omp_if(parallel)}"] if parallel else []) + block(region)
    params = pointer_params(ctx, buffers)
    header = kernel_header(name, group, origins, f"{spec.describe()}, ATen's CPU algorithm")
    size_args = used_size_symbols("\n".join(body))
    params += [f"int64_t {a}" for a in size_args]
    src = [HELPERS] + header + [f'extern "C" void {name}({", ".join(params)})'] + block(body)
    return CppKernel(name, "\n".join(src), ctx.params, origins, hint(rows * n), ctx.checks_bounds, size_args)
