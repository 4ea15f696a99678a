"""Test-suite set-up shared by unit tests, notebooks (nbval) and the book build."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SHARED_DATA = ROOT.parent / "shared" / "data"

# Offline data: read the course's data files from ../shared/data when it is
# there, so no test (and no notebook kernel started by one) needs the network.
# An empty COURSE_DATA_DIR counts as unset, as course_lib.data reads it.
if SHARED_DATA.is_dir() and not os.environ.get("COURSE_DATA_DIR", "").strip():
    os.environ["COURSE_DATA_DIR"] = str(SHARED_DATA)

pytest_plugins = ["tests.nbcache"]

# Build outputs hold executed copies of the notebooks: never collect them.
# Notebooks under tests/ are fixtures (e.g. broken submissions), not tests.
collect_ignore_glob = ["_build/*", ".venv/*", "tests/*.ipynb"]
