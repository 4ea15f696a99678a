"""The CSV files an instructor hands the grader (roster, extensions, submission
times, overrides): read once, with an error that names the option, the file and
the columns its first line must name."""

from __future__ import annotations

import csv
from pathlib import Path


def read_table(path: str | Path, option: str, columns: list[str]) -> list[dict[str, str]]:
    """The rows of the CSV ``path`` (given as ``--option``), which must have ``columns``.

    A byte-order mark (Excel's UTF-8) is dropped; a missing file or column stops
    the run with a one-line message instead of a traceback.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
    except OSError as err:
        raise SystemExit(f"error: {option} {path}: {err.strerror}") from None
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise SystemExit(
            f"error: {option} {path} has no {', '.join(missing)} column; its first line "
            f"must name the columns: {','.join(columns)}"
        )
    return rows
