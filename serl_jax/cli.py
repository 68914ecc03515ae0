"""What the command-line programs share: command lines that mix flags and overrides, and
the printed results tables.

Command lines. ``python -m serl_jax.train``, ``serl_jax.evaluate`` and
``serl_jax.benchmark`` take ``section.key=value`` overrides as one positional list beside
their flags. ``ArgumentParser.parse_args`` fills such a list from one run of positional
arguments only, so ``--seed 7 loop.min_iterations=1 --out runs loop.executor=ray`` was
refused ("unrecognized arguments: loop.executor=ray"). :func:`parse_command_line` parses
with ``parse_intermixed_args``: overrides may stand anywhere among the flags and keep
their order, and bad input still gets argparse's usage message and exit status 2.

Tables. :func:`render_table` renders a results table with rich
(https://rich.readthedocs.io), in plain ASCII without colour. The default (compact)
table fits :data:`WIDTH` columns: columns that are the same on every row or undefined on
every row are left out and named below it, a value's interval stands on the line under
it, and rows are grouped under their market; ``wide=True`` (the ``--wide`` flag,
:func:`add_wide_flag`, and the run folders' ``results.txt``) shows every column, one line
per row, each cell ``value [low, high]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import textwrap
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

__all__ = [
    "MISSING",
    "WIDTH",
    "Column",
    "add_wide_flag",
    "parse_command_line",
    "render_table",
]

WIDTH = 120
"""Characters per line of the compact table and of its notes."""
MISSING = ("n/a", "-")
"""Cell texts of an undefined value (``n/a``) or of one not computed (``-``)."""

# Rich's SIMPLE box in ASCII: a dashed rule under the header, a blank line between groups.
_BOX = box.Box("    \n    \n -  \n    \n    \n -  \n    \n    \n", ascii=True)

Cell = str | tuple[str, str, str]
"""A cell: its text, or ``(value, low, high)``, a value with its interval."""


def parse_command_line(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace:
    """Parses a command line whose positional arguments may stand among the flags.

    ``parser.parse_intermixed_args``: the optional arguments are parsed first, then every
    remaining argument, in order, fills the positionals, so a ``nargs="*"`` list of
    ``section.key=value`` overrides collects every override wherever it stands.

    Args:
        parser: the program's parser (no subparsers: argparse refuses intermixed parsing
            with them).
        argv: the arguments without the program name, or None for ``sys.argv[1:]``.

    Returns:
        The namespace, as ``parse_args`` would return it for the same arguments in
        flags-then-positionals order.

    Raises:
        SystemExit: status 2 with argparse's usage message on bad input (status 0 for
            ``--help``).
    """
    return parser.parse_intermixed_args(None if argv is None else list(argv))


def add_wide_flag(parser: argparse.ArgumentParser) -> None:
    """Adds ``--wide`` (``store_true``, ``args.wide``): print every column of the results
    table (:func:`render_table`) instead of the compact one that fits :data:`WIDTH`."""
    parser.add_argument(
        "--wide",
        action="store_true",
        help=f"print every column of the results table (default: a table that fits {WIDTH} "
        "columns, leaving out the columns that are the same on every row)",
    )


@dataclasses.dataclass(frozen=True)
class Column:
    """A column of :func:`render_table`.

    Attributes:
        title: the header.
        text: left-aligned text that may wrap (names); otherwise a right-aligned number
            that never wraps.
        compact_interval: for cells with an interval, whether the compact table shows
            the interval (on the line under the value); the wide one always does.
        compact: whether the compact table may show the column (the wide one shows
            every column).
    """

    title: str
    text: bool = False
    compact_interval: bool = False
    compact: bool = True


def _joined(cell: Cell) -> str:
    return cell if isinstance(cell, str) else f"{cell[0]} [{cell[1]}, {cell[2]}]"


def _value(cell: Cell) -> str:
    return cell if isinstance(cell, str) else cell[0]


def _missing(cell: Cell) -> bool:
    return all(part in MISSING for part in ((cell,) if isinstance(cell, str) else cell))


def _has_interval(cell: Cell) -> bool:
    return not isinstance(cell, str) and not (cell[1] in MISSING and cell[2] in MISSING)


def render_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Cell]],
    *,
    groups: Sequence[str] | None = None,
    group_title: str = "market",
    wide: bool = False,
    notes: Sequence[str] = (),
) -> str:
    """A results table as text: the compact one (default) or the wide one.

    Compact: every line at most :data:`WIDTH` characters. Columns without ``compact``
    are left out, text columns are always shown, and a number column is left out when
    it is undefined on every row (each cell ``n/a`` or ``-``, :data:`MISSING`) or, with
    two rows or more, the same on every row; a note under the table names what was
    left out and the common values. A title's unit, ``(...)``, goes on a second header
    line. Interval cells show the value, and for columns with ``compact_interval`` the
    interval on the next line unless no row has one. With ``groups``, each group's rows
    follow a line with its label (in the first column, which should be a text column),
    indented, groups in the order they first appear and separated by a blank line.
    Where the table would still be wider than :data:`WIDTH`, rich wraps the text cells
    (and at last crops); notes wrap at it.

    Wide: every column, one line per row, interval cells as ``value [low, high]``, a
    first column ``group_title`` with each row's group, rows in their given order.

    Args:
        columns: the columns in order.
        rows: per row, one cell per column: a string, or ``(value, low, high)`` strings.
        groups: per row, its group's label (e.g. the market), or None.
        group_title: the header of the wide table's group column.
        wide: the wide table.
        notes: lines printed under the table (footers).

    Returns:
        The table and its notes, lines without trailing spaces, no final newline.

    Raises:
        ValueError: a row with another number of cells than ``columns``, or ``groups`` of
            another length than ``rows``.
    """
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(
                f"render_table: row {i} has {len(row)} cells, expected one per column "
                f"({len(columns)})"
            )
    if groups is not None and len(groups) != len(rows):
        raise ValueError(f"render_table: {len(groups)} group labels for {len(rows)} rows")
    table = Table(
        box=_BOX,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        header_style=None,
        highlight=False,
    )
    if wide:
        if groups is not None:
            table.add_column(group_title, no_wrap=True)
        for column in columns:
            table.add_column(column.title, justify="left" if column.text else "right", no_wrap=True)
        for i, row in enumerate(rows):
            label = [] if groups is None else [groups[i]]
            table.add_row(*label, *(_joined(cell) for cell in row))
        return _text(table, None, notes)

    wide_only, same, undefined, shown, intervals = [], [], [], [], set()
    for j, column in enumerate(columns):
        cells = [row[j] for row in rows]
        if not column.compact:
            wide_only.append(column.title)
        elif column.text:
            shown.append(j)
        elif all(_missing(cell) for cell in cells):
            undefined.append(column.title)
        elif len(rows) > 1 and len({_joined(cell) for cell in cells}) == 1:
            common = cells[0] if _has_interval(cells[0]) else _value(cells[0])
            same.append(f"{column.title} {_joined(common)}")
        else:
            shown.append(j)
            if column.compact_interval and any(_has_interval(cell) for cell in cells):
                intervals.add(j)
    for j in shown:
        text = columns[j].text
        table.add_column(
            columns[j].title.replace(" (", "\n("),
            justify="left" if text else "right",
            no_wrap=not text,
            overflow="fold" if text else "ellipsis",
        )

    def cells(row: Sequence[Cell], indent: str) -> list[str]:
        out = []
        for j in shown:
            cell = row[j]
            if j in intervals and _has_interval(cell):
                out.append(f"{cell[0]}\n[{cell[1]}, {cell[2]}]")
            else:
                out.append(indent + _value(cell) if columns[j].text else _value(cell))
        return out

    if groups is None:
        for row in rows:
            table.add_row(*cells(row, ""))
    else:
        labels = list(dict.fromkeys(groups))
        for k, label in enumerate(labels):
            table.add_row(label, *[""] * (len(shown) - 1))
            members = [i for i, group in enumerate(groups) if group == label]
            for m, i in enumerate(members):
                last = m == len(members) - 1 and k < len(labels) - 1
                table.add_row(*cells(rows[i], "  "), end_section=last)
    left_out = [", ".join(wide_only)] if wide_only else []
    if same:
        left_out.append("the same on every row: " + ", ".join(same))
    if undefined:
        left_out.append("undefined on every row: " + ", ".join(undefined))
    if left_out:
        notes = [f"Not shown (--wide shows every column): {'; '.join(left_out)}.", *notes]
    return _text(table, WIDTH, notes)


def _text(table: Table, width: int | None, notes: Sequence[str]) -> str:
    """Rich's rendering of ``table`` at ``width`` characters (None: its natural width),
    then ``notes`` (wrapped at ``width``)."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width or 100_000,
        color_system=None,
        markup=False,
        highlight=False,
        emoji=False,
        legacy_windows=False,
        force_jupyter=False,  # in a notebook rich would display the table instead of writing it
    )
    console.print(table)
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    for note in notes:
        if width:
            lines += textwrap.wrap(note, width, subsequent_indent="  ", break_on_hyphens=False)
        else:
            lines.append(note)
    return "\n".join(lines)
