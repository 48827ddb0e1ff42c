"""Chunked reading of numeric text tables, plain or gzip: the parser under the edge-list and OGB readers.

A file is read in blocks of whole lines (``BLOCK_BYTES`` each); each block is parsed by
``np.loadtxt`` into a small array that the caller copies into its preallocated result, so the text
and the arrays of a whole file are never held at the same time. When a block does not parse, it is
scanned line by line to name the exact line and token. Files are decompressed on the fly when they
start with the gzip magic bytes; a truncated or corrupt archive is reported with the file name.

Comments start with ``#`` or ``%`` (anywhere on a line); blank lines are skipped; line numbers in
messages are 1-based and count every line of the file.
"""

from __future__ import annotations

import gzip
import io
import os
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

BLOCK_BYTES = 4 << 20
COMMENTS = ("#", "%")
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class Block:
    """A run of whole lines of one file."""

    path: str
    first_line: int  # 1-based number of the block's first line in the file
    text: str

    def data_lines(self) -> Iterator[tuple[int, str]]:
        """(line number, line without its comment) for every line that holds data."""
        for offset, line in enumerate(self.text.splitlines()):
            data = strip_comment(line).strip()
            if data:
                yield self.first_line + offset, data

    def line_of_row(self, row: int) -> int:
        """The line number of the ``row``-th data line (0-based) of this block."""
        for index, (lineno, _) in enumerate(self.data_lines()):
            if index == row:
                return lineno
        raise IndexError(f"{self.path}: block starting at line {self.first_line} has no data row {row}")


def strip_comment(line: str) -> str:
    cut = min((i for i in (line.find(c) for c in COMMENTS) if i >= 0), default=len(line))
    return line[:cut]


def require_file(path: str | os.PathLike, what: str = "input file") -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such {what}")
    return path


def open_binary(path: str) -> BinaryIO:
    """Opens ``path`` for reading bytes, through gzip when the file starts with gzip's magic bytes."""
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == GZIP_MAGIC
    return gzip.open(path, "rb") if gzipped else open(path, "rb")


def iter_raw_blocks(path: str, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """Yields the bytes of ``path`` in blocks that end at a line break (the last may not)."""
    rest = b""
    with open_binary(path) as f:
        while True:
            try:
                data = f.read(block_bytes)
            except (EOFError, OSError, zlib.error) as err:
                raise ValueError(f"{path}: truncated or corrupt gzip file ({err})") from None
            if not data:
                break
            buf = rest + data
            cut = buf.rfind(b"\n") + 1
            if cut == 0:
                rest = buf
                continue
            rest = buf[cut:]
            yield buf[:cut]
    if rest:
        yield rest


def iter_blocks(path: str, block_bytes: int = BLOCK_BYTES) -> Iterator[Block]:
    """Yields the file as :class:`Block` objects of whole lines with their first line numbers."""
    line = 1
    for raw in iter_raw_blocks(path, block_bytes):
        yield Block(path, line, raw.decode("utf-8", errors="replace"))
        line += raw.count(b"\n")


def count_lines(path: str, block_bytes: int = 16 << 20) -> int:
    """Number of lines in ``path`` (a last line without a line break counts): an upper bound on the
    number of data rows, used to preallocate result arrays."""
    lines = 0
    last = b"\n"
    for raw in iter_raw_blocks(path, block_bytes):
        lines += raw.count(b"\n")
        last = raw[-1:]
    return lines + (last != b"\n")


def parse_block(
    block: Block,
    *,
    columns: int,
    dtype: type,
    delimiter: str | None = None,
    exact: bool = False,
) -> np.ndarray:
    """Parses the first ``columns`` values of every data line of ``block`` into [rows, columns].

    ``exact`` requires exactly ``columns`` values per line (feature tables); otherwise extra columns
    (edge weights, timestamps) are ignored. Raises ValueError naming the file, line and token.
    """
    usecols = None if exact else tuple(range(columns))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
            rows = np.loadtxt(
                io.StringIO(block.text),
                dtype=dtype,
                comments=COMMENTS,
                delimiter=delimiter,
                usecols=usecols,
                ndmin=2,
                encoding=None,
            )
    except ValueError as err:
        raise locate_error(block, columns=columns, dtype=dtype, delimiter=delimiter, exact=exact, cause=err) from None
    if rows.size == 0:
        return np.zeros((0, columns), dtype=dtype)
    if rows.shape[1] != columns:  # exact tables: a consistent but wrong column count
        raise ValueError(
            f"{block.path}, line {block.line_of_row(0)}: expected {columns} values per line, found {rows.shape[1]}"
        )
    return rows


def locate_error(
    block: Block, *, columns: int, dtype: type, delimiter: str | None, exact: bool, cause: Exception
) -> ValueError:
    """Scans ``block`` line by line and returns the ValueError that names the first bad line."""
    convert = int if np.issubdtype(dtype, np.integer) else float
    for lineno, data in block.data_lines():
        tokens = [t.strip() for t in data.split(delimiter)]
        if len(tokens) < columns or (exact and len(tokens) != columns):
            wanted = f"{columns}" if exact else f"at least {columns}"
            return ValueError(f"{block.path}, line {lineno}: expected {wanted} values, found {len(tokens)}: '{data}'")
        for token in tokens[:columns]:
            try:
                convert(token)
            except ValueError:
                kind = "an integer" if convert is int else "a number"
                return ValueError(f"{block.path}, line {lineno}: '{token}' is not {kind}")
    return ValueError(f"{block.path}, lines from {block.first_line}: could not be parsed ({cause})")


def check_range(block: Block, rows: np.ndarray, low: int, high: int | None, what: str) -> None:
    """Raises ValueError naming the line of the first value of ``rows`` outside [low, high)."""
    bad = rows < low if high is None else (rows < low) | (rows >= high)
    if not bad.any():
        return
    row, col = (int(i[0]) for i in np.nonzero(bad.reshape(len(rows), -1)))
    value = int(rows.reshape(len(rows), -1)[row, col])
    bound = f">= {low}" if high is None else f"in [0, {high})" if low == 0 else f"in [{low}, {high})"
    raise ValueError(f"{block.path}, line {block.line_of_row(row)}: {what} {value} is not {bound}")


def detect_delimiter(block: Block) -> str | None:
    """',' when the first data line has a comma, else None (any whitespace)."""
    for _, data in block.data_lines():
        return "," if "," in data else None
    return None
