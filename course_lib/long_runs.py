"""Runs longer than a chapter's budget, recorded once with their provenance.

A chapter trains within about a minute on a laptop CPU. Some of its questions
need more: does a comparison still hold once every model has converged? Such
a run is made once, outside the chapter, by the maintainers' tool

    python tools/long_run.py ch10_exo

which executes the chapter with a given budget (an environment variable the
chapter reads) under several seeds, through ``tools/sweep.py``, and
writes the numbers the chapter records (``course_lib.record``) to
``course_lib/recorded/<name>.json``, with the date, the machine, the command
and a hash of the notebook cells that define the experiment. The chapter
shows the file through :func:`load`. ``tests/test_long_runs.py`` fails when
those cells change after the recording, so a page cannot show the numbers of
an experiment whose cells it no longer has: rerun the tool, which takes the
minutes given in ``LONG_RUNS`` (on one CPU thread). A change in the library
code those cells call is not detected; rerun the tool after one.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

__all__ = ["LONG_RUNS", "cells_hash", "code_digest", "load"]

ROOT = Path(__file__).resolve().parents[1]  # the checkout, where cells_hash reads notebooks


# name: the notebook, the environment that sets its budget, the cells (by id) that define and
# measure the experiment, the recorded numbers kept (by prefix), the seeds, and its cost; and,
# optionally, "skip": cells among them that the run leaves out (those that read this record).
_CH10 = {
    "notebook": "notebooks/ch10_time_series.ipynb",
    # the data; the forecast windows; the four models' training; their validation record
    # and test errors; the attention maps
    "cells": ["478cee53", "aeae7599", "590de2d4", "c10exo02", "c10xat02"],
    "keep": ["exo_", "horizon_", "cross_"],
    "seeds": [0, 1, 2, 3],
}
LONG_RUNS: dict[str, dict] = {
    # chapter 10's covariate designs at the chapter's own budget, over four chapter seeds
    "ch10_exo_150": {
        **_CH10,
        "env": {"COURSE_CH10_EXO_STEPS": "150"},
        "minutes": "about 1.5 a seed",
    },
    # ... and trained for 1000 updates
    "ch10_exo_1000": {
        **_CH10,
        "env": {"COURSE_CH10_EXO_STEPS": "1000"},
        "minutes": "about 7 a seed, up to 10",
    },
    # chapter 13's data-fraction sweep at all three training-set sizes, three seeds each (the
    # chapter runs the smallest, one seed), over four chapter seeds
    "ch13_sweep": {
        "notebook": "notebooks/ch13_vision_transformer.ipynb",
        "env": {"COURSE_CH13_FRACTIONS": "0.05,0.2,1.0", "COURSE_CH13_SEEDS": "3"},
        # the data and split; fit and the ViT; the CNN; the scrambled pixels; the sweep
        "cells": [
            "65cbf2bf",
            "05b7a1c0",
            "fc9661b4",
            "c13cnn03",
            "c13perm01",
            "c13frac02",
            "c13frac02b",
            "c13frac02c",
        ],
        "keep": ["sweep_"],
        "seeds": [0, 1, 2, 3],
        "minutes": "about 2 a seed, up to 3",
    },
    # chapter 2's copy experiment with all six models, the parameter-count control and the
    # Transformer included (the chapter trains the other four live), over four chapter seeds
    "ch02_copy": {
        "notebook": "notebooks/ch02_attention_seq2seq.ipynb",
        "env": {"COURSE_CH02_ALL_ARMS": "1"},
        # the six models' training; their evaluation at every length; what is recorded
        "cells": ["c5e97249", "18cbca31", "c02rec01"],
        "keep": ["x2_"],
        "seeds": [0, 1, 2, 3],
        "minutes": "about 1 a seed",
    },
    # chapter 7's extrapolation arms and learned table with three seeds each (the chapter
    # trains one live), over four chapter seeds
    "ch07_positions": {
        "notebook": "notebooks/ch07_absolute_positions.ipynb",
        "env": {"COURSE_CH07_RUNS": "3"},
        # the model, the five arms' training and measures; the learned table's training, the
        # similarity of its rows and its best shift map
        "cells": ["133b6c91", "bcf82803", "4df0843c", "c7shift02"],
        "skip": ["c7long01"],
        "keep": ["x7_", "late_over_early_", "learned_", "random_shift_fit"],
        "seeds": [0, 1, 2, 3],
        "minutes": "about 1.5 a seed",
    },
    # chapter 8's eight position methods with three seeds each (the chapter trains one seed of
    # three of them live), and position interpolation on their RoPE models, over four chapter seeds
    "ch08_positions": {
        "notebook": "notebooks/ch08_relative_positions.ipynb",
        "env": {"COURSE_CH08_RUNS": "3", "COURSE_CH08_ALL_ARMS": "1"},
        # the setup; every method's training and evaluation; position interpolation
        "cells": ["14e1e756", "681b1fbe", "c8pi0002"],
        "skip": ["c8long01", "53a9b375"],  # the record, and the figure that draws it
        "keep": ["x8_"],
        "seeds": [0, 1, 2, 3],
        "minutes": "about 2.3 a seed (as recorded, on a shared core)",
    },
    # chapter 12's fine-tuning comparison with its learning-rate search and three runs per arm
    # (the chapter trains one run per arm live, at the rates the search chose), over four
    # chapter seeds
    "ch12_finetune": {
        "notebook": "notebooks/ch12_masked_language_models.ipynb",
        "env": {"COURSE_CH12_FULL": "1"},
        # the tokenizer; the windows; the MLM pretraining; the search, the runs and the probes
        "cells": ["60c858ab", "fe19007f", "a3593441", "4b8e275c"],
        "skip": ["c12rec01"],
        "keep": ["ft_"],
        "seeds": [0, 1, 2, 3],
        "minutes": "about 1.2 a seed",
    },
    # chapter 11's full run: 1500 pretraining steps (the chapter trains 600 live) and every
    # fine-tuning method at every rate of its grid (the chapter trains the chosen rates), over
    # four chapter seeds
    "ch11_full": {
        "notebook": "notebooks/ch11_language_models.ipynb",
        "env": {"COURSE_CH11_FULL": "1"},
        # the data; the pretraining and its validation loss; the next-character distributions;
        # the tuning texts; the grid and the control; their test losses
        "cells": ["504cec3a", "c1513a13", "80a4364b", "c11tk02", "bfd09aa1", "c11pe04", "c11pe06"],
        "skip": ["c11long01"],
        "keep": [
            "val_",
            "pretrain_",
            "tail_",
            "forced_",
            "open_",
            "pick_",
            "full_",
            "lora_",
            "adapter",
            "play_part",
            "speaker_part",
            "crossover",
        ],
        "seeds": [0, 1, 2, 3],
        "minutes": "about 1.7 a seed on a quiet core, 2.4 as recorded on a shared one",
    },
    # chapter 14's Cora reproduction with the paper's 10 seeds per model (the chapter trains
    # one live), under chapter seed 0
    "ch14_cora": {
        "notebook": "notebooks/ch14_graph_attention.ipynb",
        "env": {"COURSE_CH14_SEEDS": "10"},
        # the data; the four models' training; every run's test accuracy and epochs
        "cells": ["1ad390dd", "49ba848e", "c14cora2"],
        "keep": ["cora_run_"],
        "seeds": [0],
        "minutes": "about 10 of one CPU core, 5 on two",
    },
}


def cells_hash(notebook: str | Path, cell_ids: list[str]) -> str:
    """SHA-256 of the sources of the cells ``cell_ids`` of ``notebook``, in that order."""
    cells = {c.get("id"): c for c in json.loads((ROOT / notebook).read_text())["cells"]}
    missing = [i for i in cell_ids if i not in cells]
    if missing:
        raise KeyError(f"cells_hash: {notebook} has no cells with ids {missing}")
    digest = hashlib.sha256()
    for i in cell_ids:
        digest.update("".join(cells[i]["source"]).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def code_digest(notebook: str | Path) -> str:
    """The first 12 hex digits of :func:`cells_hash` over every code cell of ``notebook``:
    what a recorded timing or run of the whole notebook was measured on."""
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    return cells_hash(notebook, [c["id"] for c in cells if c["cell_type"] == "code"])[:12]


def load(name: str) -> dict:
    """The recorded run ``name``: ``{"runs": [{"seed", "results", ...}], "command", ...}``."""
    if name not in LONG_RUNS:
        raise KeyError(f"load: no long run named {name!r}; the recorded ones: {sorted(LONG_RUNS)}")
    path = resources.files("course_lib") / "recorded" / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"load: {name!r} has not been recorded; run `python tools/long_run.py {name}`"
        )
    return json.loads(path.read_text())
