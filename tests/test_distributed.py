"""Chapter 9: data-parallel training with two processes equals one process.

Covers course_lib.distributed.
"""

from __future__ import annotations

import pytest
import torch

from course_lib import distributed


def test_ddp_two_processes_equal_one_process():
    ddp = distributed.run_ddp(world_size=2, steps=5, timeout=60)
    single = distributed.train_single(steps=5)
    init = distributed.make_model().state_dict()
    for k in single:
        assert torch.allclose(ddp[k], single[k], atol=1e-6), k
    assert any(not torch.allclose(single[k], init[k]) for k in single)  # it did train


def test_ddp_timeout_kills_the_ranks_and_says_so():
    # Starting Python and importing torch alone takes longer than this.
    with pytest.raises(RuntimeError, match=r"did not finish within 0.2 s(.|\n)*--- rank 1"):
        distributed.run_ddp(world_size=2, steps=5, timeout=0.2)
