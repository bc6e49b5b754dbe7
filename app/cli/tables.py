"""Rows the client verbs print: a rich table (aligned columns under a header) on a
terminal, tab-separated lines without a header when piped (``cut -f1`` takes the ids),
and one line on stderr saying the list is empty rather than printing nothing."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

Cell = str | int | None


def _text(cell: Cell) -> str:
    return "" if cell is None else str(cell)


def print_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    *,
    empty: str,
    terminal: bool | None = None,
) -> None:
    """Print ``rows`` under ``headers``; ``empty`` (on stderr) when there are none.
    ``terminal``: render for a terminal (default: whether stdout is one). A missing
    value (``None``) is an empty cell, never the word ``None``."""
    if not rows:
        typer.echo(empty, err=True)
        return
    if terminal is None:
        terminal = sys.stdout.isatty()
    if not terminal:
        for row in rows:
            typer.echo("\t".join(_text(cell).replace("\t", " ") for cell in row))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(_text(cell) for cell in row))
    Console(soft_wrap=False).print(table)
