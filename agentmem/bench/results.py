"""Printing a bench result as a table and writing it as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def emit(title: str, result: dict[str, Any], json_out: Path | None) -> None:
    table = Table(title=title)
    table.add_column("key")
    table.add_column("value", justify="right")
    for key, value in _flatten(result):
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    Console().print(table)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2) + "\n")


def _flatten(data: dict[str, Any], prefix: str = ""):
    """Table rows: nested keys dotted; a list of records (per-record detail, hundreds of them
    for some files) as its count, since it is read in the JSON, not on a terminal."""
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            yield f"{prefix}{key}", f"{len(value)} rows (in the JSON)"
        else:
            yield f"{prefix}{key}", value
