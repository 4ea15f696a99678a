"""Visible tests, one module per assignment: ``<assignment id with underscores>.py``.

Each module sets ``ASSIGNMENT`` (the id stored in the exercise notebook's
metadata) and ``TITLE``, and defines tests with
:func:`course_lib.grading.registry.test`. Students can read these files: they
build their inputs with fixed seeds on the CPU and compare with PyTorch, never
with a copy of the solution.
"""
