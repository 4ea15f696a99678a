"""Reference implementations for *Attention Models, from motivation to modern variants*.

Each module holds one idea of the course and cites the chapter and equations it
implements.  Notebooks import from here and show the source with
:func:`course_lib.show_source` instead of redefining it.

The standard opening of every notebook is::

    import course_lib
    device = course_lib.setup_notebook(seed=0)
"""

from course_lib.runtime import (
    derived_seed,
    generator,
    get_device,
    record,
    seed_everything,
    setup_notebook,
)
from course_lib.show import html_table, max_diff, show_source

__version__ = "0.1.0"

__all__ = [
    "get_device",
    "derived_seed",
    "generator",
    "seed_everything",
    "setup_notebook",
    "show_source",
    "html_table",
    "max_diff",
    "record",
    "__version__",
]
