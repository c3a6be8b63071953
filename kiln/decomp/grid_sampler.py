"""Decomposition: ``grid_sampler_2d`` (``F.grid_sample`` on 4-D inputs), bilinear and nearest, with
zeros, border and reflection padding, corners aligned or not -- as ATen's vectorized CPU kernel
computes it (GridSamplerKernel.cpp): coordinates unnormalized as ``(g + 1) * s`` (minus 0.5 without
aligned corners), clipped or reflected by the padding mode, then the corners gathered (out-of-bounds
corners read 0 under zeros padding) and summed with the same weights in the same order.
Bicubic and other dtypes than float32/float64 stay whole (ATen's kernel).
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition

aten = torch.ops.aten

BILINEAR, NEAREST = 0, 1
ZEROS, BORDER, REFLECTION = 0, 1, 2


def _scalar(value, like):
    return aten.scalar_tensor.default(value, dtype=like.dtype, device=like.device)


def _reflect(coord, size: int, align_corners: bool):
    """ATen's reflect_coordinates: mirror into [low, low + span] (span = size - 1 with aligned corners,
    else size, low = -0.5)."""
    twice_span = 2 * (size - 1) if align_corners else 2 * size
    if twice_span <= 0:
        return aten.mul.Scalar(coord, 0)
    low = 0.0 if align_corners else -0.5
    shifted = aten.abs.default(aten.sub.Scalar(coord, low) if low else coord)
    flips = aten.trunc.default(aten.div.Scalar(shifted, twice_span))
    extra = aten.sub.Tensor(shifted, aten.mul.Scalar(flips, twice_span))
    folded = aten.minimum.default(extra, aten.rsub.Scalar(extra, twice_span))
    return aten.add.Scalar(folded, low) if low else folded


def source_coordinate(g, size: int, padding_mode: int, align_corners: bool):
    """Input coordinate (float) of normalized grid coordinate ``g`` along a dim of ``size``."""
    if align_corners:
        coord = aten.mul.Scalar(aten.add.Scalar(g, 1), (size - 1) / 2)
    else:
        coord = aten.sub.Scalar(aten.mul.Scalar(aten.add.Scalar(g, 1), size / 2), 0.5)
    if padding_mode == REFLECTION:
        coord = _reflect(coord, size, align_corners)
    if padding_mode in (BORDER, REFLECTION):  # clip_coordinates: min(size - 1, max(coord, 0)), NaN kept
        coord = aten.minimum.default(aten.maximum.default(coord, _scalar(0, coord)), _scalar(size - 1, coord))
    return coord


def _corner(x, n_index, c_index, xi, yi, check_bounds: bool):
    """x[n, c, yi, xi] as (N, C, Ho, Wo), 0 where (xi, yi) is outside the input (with ``check_bounds``;
    float coordinates compared, as ATen compares their int conversions: NaN and huge values are outside)."""
    inside, ys, xs = _corner_index(xi, yi, x.shape[2], x.shape[3])
    value = aten.index.Tensor(x, [n_index, c_index, ys, xs])
    if not check_bounds:
        return value
    return aten.where.self(inside, value, _scalar(0, value))


def _corner_index(xi, yi, height: int, width: int):
    """(inside (N, 1, Ho, Wo), y index, x index): int64 positions, clamped into the input, of float
    corner coordinates; NaN and outside corners read a safe place (their value is masked)."""
    inside = aten.logical_and.default(
        aten.logical_and.default(aten.gt.Scalar(xi, -1), aten.lt.Scalar(xi, width)),
        aten.logical_and.default(aten.gt.Scalar(yi, -1), aten.lt.Scalar(yi, height)))
    xs = aten.clamp.default(aten.where.self(aten.eq.Tensor(xi, xi), xi, _scalar(0, xi)), 0, width - 1)
    ys = aten.clamp.default(aten.where.self(aten.eq.Tensor(yi, yi), yi, _scalar(0, yi)), 0, height - 1)
    to_index = lambda t: aten.unsqueeze.default(aten._to_copy.default(t, dtype=torch.int64), 1)  # noqa: E731
    return aten.unsqueeze.default(inside, 1), to_index(ys), to_index(xs)


@decomposition(aten.grid_sampler_2d.default)
def grid_sampler_2d(x, grid, interpolation_mode, padding_mode, align_corners):
    if (x.dtype not in (torch.float32, torch.float64) or grid.dtype != x.dtype or x.dim() != 4
            or interpolation_mode not in (BILINEAR, NEAREST) or padding_mode not in (ZEROS, BORDER, REFLECTION)
            or any(isinstance(s, torch.SymInt) for s in list(x.shape) + list(grid.shape)) or x.numel() == 0
            or grid.numel() == 0):
        return NotImplemented
    n, c, height, width = x.shape
    ix = source_coordinate(aten.select.int(grid, 3, 0), width, padding_mode, align_corners)  # (N, Ho, Wo)
    iy = source_coordinate(aten.select.int(grid, 3, 1), height, padding_mode, align_corners)
    n_index = aten.view.default(aten.arange.start_step(0, n, 1, dtype=torch.int64, device=x.device), [n, 1, 1, 1])
    c_index = aten.view.default(aten.arange.start_step(0, c, 1, dtype=torch.int64, device=x.device), [1, c, 1, 1])
    # the corners are bounds-checked under every padding mode (the east and south corners of a clipped
    # coordinate on the last row or column fall outside; their weight is 0)
    check = True
    if interpolation_mode == NEAREST:
        xr, yr = aten.round.default(ix), aten.round.default(iy)  # half to even, as nearbyint
        return _corner(x, n_index, c_index, xr, yr, check)
    x_w, y_n = aten.floor.default(ix), aten.floor.default(iy)
    w, n_ = aten.sub.Tensor(ix, x_w), aten.sub.Tensor(iy, y_n)
    e, s = aten.rsub.Scalar(w, 1), aten.rsub.Scalar(n_, 1)
    x_e, y_s = aten.add.Scalar(x_w, 1), aten.add.Scalar(y_n, 1)
    weights = [aten.mul.Tensor(s, e), aten.mul.Tensor(s, w), aten.mul.Tensor(n_, e), aten.mul.Tensor(n_, w)]
    corners = [(x_w, y_n), (x_e, y_n), (x_w, y_s), (x_e, y_s)]  # nw, ne, sw, se
    out = None
    for (xi, yi), weight in zip(corners, weights):
        term = aten.mul.Tensor(_corner(x, n_index, c_index, xi, yi, check), aten.unsqueeze.default(weight, 1))
        out = term if out is None else aten.add.Tensor(out, term)
    return out


def _reflect_grad(coord, size: int, align_corners: bool):
    """The sign reflect_coordinates_get_grad gives: -1 where the reflection flips the direction."""
    twice_span = 2 * (size - 1) if align_corners else 2 * size
    if twice_span <= 0:
        return aten.mul.Scalar(coord, 0)
    low = 0.0 if align_corners else -0.5
    shifted = aten.sub.Scalar(coord, low) if low else coord
    negative = aten.lt.Scalar(shifted, 0)
    magnitude = aten.abs.default(shifted)
    extra = aten.sub.Tensor(magnitude, aten.mul.Scalar(aten.trunc.default(aten.div.Scalar(magnitude, twice_span)), twice_span))
    flip = aten.gt.Tensor(extra, aten.rsub.Scalar(extra, twice_span))
    return aten.where.self(aten.logical_xor.default(flip, negative), _scalar(-1, coord), _scalar(1, coord))


def source_coordinate_and_grad(g, size: int, padding_mode: int, align_corners: bool):
    """(``source_coordinate``, d coordinate / d g) as ATen's apply_get_grad: the unnormalize scale, times
    the reflection's sign, times 0 where the clip holds the coordinate at (or beyond) a border."""
    scale = (size - 1) / 2 if align_corners else size / 2
    coord = source_coordinate(g, size, padding_mode, align_corners)
    mult = _scalar(scale, g)
    if padding_mode == ZEROS:
        return coord, aten.expand.default(mult, list(g.shape))
    if padding_mode == REFLECTION:
        raw = (aten.mul.Scalar(aten.add.Scalar(g, 1), scale) if align_corners
               else aten.sub.Scalar(aten.mul.Scalar(aten.add.Scalar(g, 1), scale), 0.5))
        mult = aten.mul.Tensor(_reflect_grad(raw, size, align_corners), mult)
    inside = aten.logical_and.default(aten.gt.Scalar(coord, 0), aten.lt.Scalar(coord, size - 1))
    return coord, aten.where.self(inside, aten.expand.default(mult, list(g.shape)), _scalar(0, g))


def _scatter_corner(grad_input, n_index, c_index, xi, yi, values):
    """grad_input[n, c, yi, xi] += values where (xi, yi) is inside; elsewhere nothing."""
    inside, ys, xs = _corner_index(xi, yi, grad_input.shape[2], grad_input.shape[3])
    masked = aten.where.self(inside, values, _scalar(0, values))
    return aten.index_put.default(grad_input, [n_index, c_index, ys, xs], masked, True)


@decomposition(aten.grid_sampler_2d_backward.default)
def grid_sampler_2d_backward(grad, x, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    """ATen's CPU backward: the output gradient scattered (added) to the corners with the forward's
    weights, and the grid's gradient from the corner values' differences times the coordinate's."""
    if grid_sampler_2d(x, grid, interpolation_mode, padding_mode, align_corners) is NotImplemented \
            or grad.dtype != x.dtype:
        return NotImplemented
    n, c, height, width = x.shape
    ix, gx_mult = source_coordinate_and_grad(aten.select.int(grid, 3, 0), width, padding_mode, align_corners)
    iy, gy_mult = source_coordinate_and_grad(aten.select.int(grid, 3, 1), height, padding_mode, align_corners)
    n_index = aten.view.default(aten.arange.start_step(0, n, 1, dtype=torch.int64, device=x.device), [n, 1, 1, 1])
    c_index = aten.view.default(aten.arange.start_step(0, c, 1, dtype=torch.int64, device=x.device), [1, c, 1, 1])
    grad_input = aten.full.default(list(x.shape), 0, dtype=x.dtype, device=x.device) if output_mask[0] else None
    if interpolation_mode == NEAREST:
        xr, yr = aten.round.default(ix), aten.round.default(iy)
        if grad_input is not None:
            grad_input = _scatter_corner(grad_input, n_index, c_index, xr, yr, grad)
        return grad_input, aten.full.default(list(grid.shape), 0, dtype=grid.dtype, device=grid.device)
    x_w, y_n = aten.floor.default(ix), aten.floor.default(iy)
    w, n_ = aten.sub.Tensor(ix, x_w), aten.sub.Tensor(iy, y_n)
    e, s = aten.rsub.Scalar(w, 1), aten.rsub.Scalar(n_, 1)
    x_e, y_s = aten.add.Scalar(x_w, 1), aten.add.Scalar(y_n, 1)
    corners = [(x_w, y_n, aten.mul.Tensor(s, e)), (x_e, y_n, aten.mul.Tensor(s, w)),
               (x_w, y_s, aten.mul.Tensor(n_, e)), (x_e, y_s, aten.mul.Tensor(n_, w))]  # nw, ne, sw, se
    if grad_input is not None:
        for xi, yi, weight in corners:
            grad_input = _scatter_corner(grad_input, n_index, c_index, xi, yi,
                                         aten.mul.Tensor(grad, aten.unsqueeze.default(weight, 1)))
    grad_grid = None
    if output_mask[1]:
        nw, ne, sw, se = (_corner(x, n_index, c_index, xi, yi, True) for xi, yi, _ in corners)
        unsq = lambda t: aten.unsqueeze.default(t, 1)  # noqa: E731
        gx = aten.add.Tensor(aten.mul.Tensor(aten.sub.Tensor(ne, nw), unsq(s)), aten.mul.Tensor(aten.sub.Tensor(se, sw), unsq(n_)))
        gy = aten.add.Tensor(aten.mul.Tensor(aten.sub.Tensor(sw, nw), unsq(e)), aten.mul.Tensor(aten.sub.Tensor(se, ne), unsq(w)))
        gx = aten.mul.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(gx, grad), [1]), gx_mult)
        gy = aten.mul.Tensor(aten.sum.dim_IntList(aten.mul.Tensor(gy, grad), [1]), gy_mult)
        grad_grid = aten.stack.default([gx, gy], 3)
    return grad_input, grad_grid
