"""What runs inside a submission's sandbox: the student process and the wire format.

Only this folder of :mod:`course_grader` (and the package's empty ``__init__``)
is bound into the sandbox; it imports nothing from the judge's side.
"""
