"""Decomposition: ``embedding_bag`` in sum, mean and max mode (``_embedding_bag`` and
``_embedding_bag_forward_only``): each index's bag from the offsets (a cumsum of start markers), the
picked rows (times the per-sample weights) added into their bag with ``index_add``, the mean divided
by ``max(bag size, 1)`` as ATen's ``apply_bag_size``. The three auxiliary outputs, which autograd
hands to ATen's backward, are ATen's CPU values: for sum an empty ``offset2bag`` and zeros; for mean
each index's bag, the bag sizes, and the bag sizes again. With ``include_last_offset`` the sums stop
at the last offset while the bag sizes (and the mean's divisor) count the last bag to the end of the
indices, as ATen's kernel has it where the last offset is not the number of indices. They take the
promoted dtype of the indices and offsets, as ATen's (int32 for both int32: its backward checks it).

On CUDA (any device but the CPU) the values follow ATen's CUDA kernels instead, whose backward reads
them: ``offset2bag`` is each index's bag in every mode, ``bag_size`` has one entry per offset, the last
bag runs to the end of the indices (also with ``include_last_offset``), ``max_indices`` is empty
outside max mode and -1 for an empty bag in it (the backward skips it), and the first bag starts at
index 0 whatever the first offset. The CPU values there made ATen's CUDA backward read an empty
``offset2bag``: an illegal memory access.

Max mode follows ATen's loop (``_max_bags``), ``max_indices`` included. ``padding_idx`` and sparse
gradients stay ATen's kernel. Offsets that ATen's CPU kernel rejects (a first offset other than 0)
are not checked here: the graph cannot raise on a value.
"""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition
from kiln.decomp.utils import to_dtype, upcast

aten = torch.ops.aten
SUM, MEAN, MAX = 0, 1, 2


def _bag_of_each_index(offsets, starts_count: int, length: int):
    """The bag of each of ``length`` indices: the number of bag starts at or before it, minus 1."""
    starts = aten.slice.Tensor(offsets, 0, 0, starts_count)
    ones = aten.full.default([starts_count], 1, dtype=torch.int64, device=offsets.device)
    # a start at ``length`` (an empty last bag) lands in the extra slot, which is dropped
    markers = aten.index_add.default(aten.full.default([length + 1], 0, dtype=torch.int64, device=offsets.device),
                                     0, starts, ones)
    return aten.sub.Scalar(aten.cumsum.default(aten.slice.Tensor(markers, 0, 0, length), 0), 1)


def _embedding_bag(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx,
                   forward_only: bool):
    if (mode not in (SUM, MEAN, MAX) or padding_idx is None or padding_idx >= 0 or indices.dim() != 1
            or offsets.dim() != 1 or weight.dim() != 2 or not weight.is_floating_point()
            or (per_sample_weights is not None and mode != SUM)
            or any(isinstance(s, torch.SymInt) for s in list(weight.shape) + list(indices.shape) + list(offsets.shape))):
        return NotImplemented
    length, n_offsets = indices.shape[0], offsets.shape[0]
    bags = n_offsets - 1 if include_last_offset else n_offsets
    if bags <= 0:
        return NotImplemented  # (no bags: ATen's empty results)
    dim = weight.shape[1]
    offsets = to_dtype(offsets, torch.int64)
    indices64 = to_dtype(indices, torch.int64)
    bag = _bag_of_each_index(offsets, bags, length)  # (length,) in [0, bags)
    cuda_layout = weight.device.type != "cpu"
    if cuda_layout:  # CUDA's first bag starts at 0 whatever the first offset (the CPU rejects another)
        bag = aten.clamp_min.default(bag, 0)
    if mode == MAX:
        out, offset2bag, sizes, max_indices = _max_bags(weight, indices64, offsets, bag, bags, length)
        if cuda_layout:
            empty_bag = aten.unsqueeze.default(aten.eq.Scalar(sizes, 0), 1)
            max_indices = aten.where.self(empty_bag, aten.scalar_tensor.default(-1, dtype=torch.int64,
                                                                                device=weight.device), max_indices)
            return out, offset2bag, _per_offset(sizes, n_offsets), max_indices
        return out, offset2bag, sizes, max_indices
    rows = upcast(aten.index_select.default(weight, 0, indices64))
    if per_sample_weights is not None:
        rows = aten.mul.Tensor(rows, aten.unsqueeze.default(upcast(per_sample_weights), 1))
    target = bag
    if include_last_offset and not cuda_layout:  # the sums stop at the last offset (the sizes below run to the end)
        position = aten.arange.start_step(0, length, 1, dtype=torch.int64, device=weight.device)
        end = aten.select.int(offsets, 0, n_offsets - 1)
        target = aten.where.self(aten.lt.Tensor(position, end), bag, aten.scalar_tensor.default(
            bags, dtype=torch.int64, device=weight.device))
    zeros = aten.full.default([bags + 1, dim], 0, dtype=rows.dtype, device=weight.device)
    out = aten.slice.Tensor(aten.index_add.default(zeros, 0, target, rows) if length else zeros, 0, 0, bags)
    aux_len = n_offsets if (forward_only and include_last_offset and mode == SUM) else bags
    if mode == SUM and not cuda_layout:
        offset2bag = aten.full.default([0], 0, dtype=torch.int64, device=weight.device)
        bag_size = aten.full.default([aux_len], 0, dtype=torch.int64, device=weight.device)
        return to_dtype(out, weight.dtype), offset2bag, bag_size, aten.clone.default(bag_size)
    sizes = aten.index_add.default(aten.full.default([bags], 0, dtype=torch.int64, device=weight.device), 0, bag,
                                   aten.full.default([length], 1, dtype=torch.int64, device=weight.device))
    if mode == MEAN:
        divisor = to_dtype(aten.clamp_min.default(sizes, 1), out.dtype)
        out = aten.div.Tensor(out, aten.unsqueeze.default(divisor, 1))
    if cuda_layout:
        no_max = aten.full.default([0], 0, dtype=torch.int64, device=weight.device)
        return to_dtype(out, weight.dtype), bag, _per_offset(sizes, n_offsets), no_max
    return to_dtype(out, weight.dtype), bag, sizes, aten.clone.default(sizes)


def _per_offset(sizes, n_offsets: int):
    """CUDA's ``bag_size``: one entry per offset (with ``include_last_offset`` the last is never read;
    ATen leaves it unset, here 0)."""
    bags = sizes.shape[0]
    if bags == n_offsets:
        return sizes
    return aten.cat.default([sizes, aten.full.default([n_offsets - bags], 0, dtype=torch.int64, device=sizes.device)])


def _in_index_dtype(result, indices, offsets):
    """The auxiliary outputs in ATen's dtype: the promoted dtype of the indices and offsets (int32 for
    both int32; ATen's backward checks it)."""
    if result is NotImplemented:
        return result
    dtype = torch.promote_types(indices.dtype, offsets.dtype)
    out, *aux = result
    return (out, *(to_dtype(t, dtype) for t in aux))


@decomposition(aten._embedding_bag.default)
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=-1):
    if sparse:
        return NotImplemented
    return _in_index_dtype(_embedding_bag(weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                                          padding_idx, False), indices, offsets)


@decomposition(aten._embedding_bag_forward_only.default)
def embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                               per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    if sparse:
        return NotImplemented
    return _in_index_dtype(_embedding_bag(weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                                          padding_idx, True), indices, offsets)


def _max_bags(weight, indices, offsets, bag, bags: int, length: int):
    """ATen's max-mode loop, per bag and column: the bag's first value, replaced by each later value
    greater than it -- so a NaN first value stays, later NaNs never win, and ties keep the earliest
    index; an empty bag gives 0 (and index 0). Bags run to the end of the indices."""
    device, dim = weight.device, weight.shape[1]
    sizes = aten.index_add.default(aten.full.default([bags], 0, dtype=torch.int64, device=device), 0, bag,
                                   aten.full.default([length], 1, dtype=torch.int64, device=device))
    if length == 0:
        zeros = aten.full.default([bags, dim], 0, dtype=weight.dtype, device=device)
        return zeros, bag, sizes, aten.full.default([bags, dim], 0, dtype=torch.int64, device=device)
    vals = aten.index_select.default(weight, 0, indices)  # (length, dim)
    nan = aten.isnan.default(vals)
    plain = aten.where.self(nan, aten.scalar_tensor.default(float("-inf"), dtype=vals.dtype, device=device), vals)
    per_bag = aten.unsqueeze.default(bag, 1)
    cols = aten.expand.default(per_bag, [length, dim])
    empty = aten.full.default([bags, dim], 0, dtype=vals.dtype, device=device)
    top = aten.scatter_reduce.two(empty, 0, cols, plain, "amax", include_self=False)
    position = aten.expand.default(aten.unsqueeze.default(
        aten.arange.start_step(0, length, 1, dtype=torch.int64, device=device), 1), [length, dim])
    is_top = aten.logical_and.default(aten.eq.Tensor(vals, aten.index_select.default(top, 0, bag)),
                                      aten.logical_not.default(nan))
    never = aten.scalar_tensor.default(length, dtype=torch.int64, device=device)
    first_top = aten.scatter_reduce.two(aten.full.default([bags, dim], length, dtype=torch.int64, device=device), 0,
                                        cols, aten.where.self(is_top, position, never), "amin", include_self=True)
    starts = aten.clamp_max.default(aten.slice.Tensor(offsets, 0, 0, bags), length - 1)  # (bags,)
    first = aten.index_select.default(vals, 0, starts)  # each bag's first value (any, for an empty bag)
    first_nan = aten.isnan.default(first)
    chosen = aten.where.self(first_nan, aten.expand.default(aten.unsqueeze.default(starts, 1), [bags, dim]), first_top)
    value = aten.where.self(first_nan, first, top)
    nonempty = aten.unsqueeze.default(aten.gt.Scalar(sizes, 0), 1)
    value = aten.where.self(nonempty, value, aten.scalar_tensor.default(0, dtype=vals.dtype, device=device))
    picked = aten.index_select.default(indices, 0, aten.reshape.default(aten.clamp_max.default(chosen, length - 1), [-1]))
    max_indices = aten.where.self(nonempty, aten.reshape.default(picked, [bags, dim]),
                                  aten.scalar_tensor.default(0, dtype=torch.int64, device=device))
    return value, bag, sizes, max_indices
