"""``python -m course_lib.grading ...``: the instructor's commands moved to ``course_grader``.

Kept so that an old command line still works: it runs ``python -m course_grader``
with the same arguments (``sync``, ``grade``, ``gradebook``, ``gradescope``).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    try:
        from course_grader.__main__ import main as grader_main
    except ImportError as err:
        print(
            f"The instructor's grader is not installed ({err}). Install it with "
            '`pip install "course-lib[grader]"` and run `python -m course_grader ...` '
            "(or `course-grader ...`).",
            file=sys.stderr,
        )
        return 2
    return grader_main(argv)


if __name__ == "__main__":
    sys.exit(main())
