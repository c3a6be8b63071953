"""Binary formats of co_exceptiontable and co_linetable (the same in 3.11 and 3.12).

See CPython's Objects/exception_handling_notes.txt and Objects/locations.md.
"""
from __future__ import annotations

import dataclasses

from kiln.capture.bytecode import versions as V


# --- exception table -------------------------------------------------------------------
# Each entry is four varints (start, length, target, depth << 1 | lasti), all in 2-byte
# code units. A varint is big-endian 6-bit chunks; bit 6 (64) says "more chunks follow",
# bit 7 (128) marks the first byte of an entry.

@dataclasses.dataclass(frozen=True)
class RawExceptionEntry:
    start: int  # byte offsets; end is exclusive
    end: int
    target: int
    depth: int
    lasti: bool


def parse_exception_table(table: bytes) -> list[RawExceptionEntry]:
    entries = []
    pos = 0

    def varint() -> int:
        nonlocal pos
        b = table[pos]
        pos += 1
        value = b & 63
        while b & 64:
            b = table[pos]
            pos += 1
            value = (value << 6) | (b & 63)
        return value

    while pos < len(table):
        start = varint() * 2
        length = varint() * 2
        target = varint() * 2
        depth_lasti = varint()
        entries.append(RawExceptionEntry(start, start + length, target, depth_lasti >> 1,
                                         bool(depth_lasti & 1)))
    return entries


def _write_exception_varint(out: bytearray, value: int, first: bool) -> None:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    for i, chunk in enumerate(chunks):
        byte = chunk | (64 if i < len(chunks) - 1 else 0)
        if first and i == 0:
            byte |= 128
        out.append(byte)


def encode_exception_table(entries: list[RawExceptionEntry]) -> bytes:
    out = bytearray()
    for e in entries:
        assert e.end > e.start and e.start % 2 == 0 and e.end % 2 == 0
        _write_exception_varint(out, e.start // 2, True)
        _write_exception_varint(out, (e.end - e.start) // 2, False)
        _write_exception_varint(out, e.target // 2, False)
        _write_exception_varint(out, (e.depth << 1) | int(e.lasti), False)
    return bytes(out)


# --- line table --------------------------------------------------------------------------
# Each entry covers 1-8 code units: first byte 0x80 | code << 3 | (units - 1), then:
#   code 0-9   short form: line unchanged; one byte col_low << 4 | (end_col - col),
#              with col = code * 8 + col_low
#   code 10-12 one-line form: line += code - 10; bytes col, end_col
#   code 13    no columns: svarint line delta
#   code 14    long form: svarint line delta, varint end_line - line, varint col + 1,
#              varint end_col + 1
#   code 15    no location
# Line deltas are relative to the last line written (initially co_firstlineno).
# varint: little-endian 6-bit chunks, bit 6 = more follow; svarint: zigzag-ish sign bit.

Location = tuple  # (line, end_line, col, end_col) with None for unknown parts; or None


def _write_varint(out: bytearray, value: int) -> None:
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)


def _write_svarint(out: bytearray, value: int) -> None:
    _write_varint(out, ((-value) << 1) | 1 if value < 0 else value << 1)


class LineTableWriter:
    def __init__(self, firstlineno: int):
        self.out = bytearray()
        self.lineno = firstlineno

    def add(self, loc: Location | None, units: int) -> None:
        """Describe the next ``units`` code units (any number; split into chunks of 8)."""
        while units > 8:
            self._entry(loc, 8)
            units -= 8
        if units > 0:
            self._entry(loc, units)

    def _first(self, code: int, units: int) -> None:
        self.out.append(0x80 | (code << 3) | (units - 1))

    def _entry(self, loc: Location | None, units: int) -> None:
        if loc is None or loc[0] is None:
            self._first(15, units)
            return
        line, end_line, col, end_col = loc
        if end_line is None:
            end_line = line
        delta = line - self.lineno
        if col is None or end_col is None:
            if end_line == line:
                self._first(13, units)
                _write_svarint(self.out, delta)
                self.lineno = line
                return
        elif end_line == line:
            if delta == 0 and col < 80 and 0 <= end_col - col < 16:
                self._first(col >> 3, units)
                self.out.append(((col & 7) << 4) | (end_col - col))
                return
            if 0 <= delta < 3 and col < 128 and end_col < 128:
                self._first(10 + delta, units)
                self.out += bytes((col, end_col))
                self.lineno = line
                return
        self._first(14, units)
        _write_svarint(self.out, delta)
        _write_varint(self.out, max(end_line - line, 0))
        _write_varint(self.out, 0 if col is None else col + 1)
        _write_varint(self.out, 0 if end_col is None else end_col + 1)
        self.lineno = line


def encode_line_table(locations: list[tuple[Location | None, int]], firstlineno: int) -> bytes:
    """``locations``: (location, size in code units) per instruction, in order.

    3.11's compiler writes one entry (or more, by 8 units) per instruction; 3.12's
    merges runs of instructions with the same location. Both decode the same, and
    doing what the running version's compiler does keeps round trips byte-identical.
    """
    writer = LineTableWriter(firstlineno)
    if V.PY311:
        for loc, units in locations:
            writer.add(loc, units)
        return bytes(writer.out)
    run_loc, run_units = None, 0
    for loc, units in locations:
        if run_units and loc == run_loc:
            run_units += units
            continue
        writer.add(run_loc, run_units)
        run_loc, run_units = loc, units
    writer.add(run_loc, run_units)
    return bytes(writer.out)
