"""The class list, and which submitted file is whose.

A roster is a CSV file with a header row and the columns ``id``, ``name``,
``email`` (any order; optional ``section`` and ``canvas_id`` are carried to
the Canvas export). Every student gets a gradebook row, whether or not a file
of theirs was found.

A file is a student's when, in this order:

1. its notebook metadata says so: ``{"course": {"student": "<id>"}}``;
2. its file name contains the student's id as a whole word: the id, with
   ``_``, ``-``, ``.``, a space or the end of the name on both sides,
   letters compared without case (``s0042.ipynb``, ``hw1_s0042.ipynb``,
   ``ch01-lstm-cell-S0042.ipynb``; Canvas's ``name_12345_67890_file.ipynb``
   matches a roster whose ``id`` is the Canvas user id 12345).

A file that matches no student, or several, is *unmatched*: it is still
graded and gets a row of its own, and the summary lists it. When a student
has several files, the one submitted last counts and the others are listed
as superseded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from course_grader.tables import read_table

__all__ = ["Student", "Matching", "read_roster", "match_files", "student_of_notebook"]

REQUIRED = ("id", "name", "email")


@dataclass(frozen=True)
class Student:
    """One line of the roster."""

    id: str
    name: str
    email: str
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Matching:
    """Which file is whose: ``files[student id]`` (possibly several), and what matched no one."""

    files: dict[str, list[str]] = field(default_factory=dict)
    unmatched: dict[str, str] = field(default_factory=dict)  # file -> why


def read_roster(path: str | Path) -> list[Student]:
    """The students of ``path`` (a CSV with id, name, email), in file order."""
    rows = read_table(path, "--roster", list(REQUIRED))
    students, seen = [], set()
    for number, row in enumerate(rows, start=2):
        sid = (row.get("id") or "").strip()
        if not sid:
            raise SystemExit(f"error: --roster {path}, line {number}: the id is empty")
        if sid.lower() in seen:
            raise SystemExit(f"error: --roster {path}, line {number}: id {sid} appears twice")
        seen.add(sid.lower())
        extra = {k: (v or "").strip() for k, v in row.items() if k and k not in REQUIRED}
        students.append(
            Student(sid, (row.get("name") or "").strip(), (row.get("email") or "").strip(), extra)
        )
    return students


def student_of_notebook(nb: dict | None) -> str | None:
    """The student id in a notebook's metadata (``{"course": {"student": id}}``), if any."""
    metadata = nb.get("metadata") if isinstance(nb, dict) else None
    course = metadata.get("course") if isinstance(metadata, dict) else None
    value = course.get("student") if isinstance(course, dict) else None
    return str(value).strip() if isinstance(value, str | int) and str(value).strip() else None


def _in_name(sid: str, name: str) -> bool:
    return re.search(r"(^|[_\-.\s])" + re.escape(sid.lower()) + r"($|[_\-.\s])", name) is not None


def match_files(
    students: list[Student], files: list[str], metadata_ids: dict[str, str | None]
) -> Matching:
    """Assign each file to a student (see the module docstring).

    ``metadata_ids[file]`` is the student id in the file's notebook metadata
    (None when there is none or the file is not a notebook).
    """
    by_id = {s.id.lower(): s for s in students}
    out = Matching()
    for path in files:
        declared = metadata_ids.get(path)
        if declared is not None:
            student = by_id.get(declared.lower())
            if student is None:
                out.unmatched[path] = f"its metadata names student {declared}, not in the roster"
            else:
                out.files.setdefault(student.id, []).append(path)
            continue
        stem = Path(path).name.lower().removesuffix(".ipynb")
        found = [s for s in students if _in_name(s.id, stem)]
        if len(found) == 1:
            out.files.setdefault(found[0].id, []).append(path)
        elif found:
            ids = ", ".join(s.id for s in found)
            out.unmatched[path] = f"its name matches several students ({ids})"
        else:
            out.unmatched[path] = "its name and metadata match no student of the roster"
    return out
