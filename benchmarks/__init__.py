"""Benchmarks of ``course_lib`` against the trusted libraries, side by side (issue 18).

``python -m benchmarks`` runs each benchmark against its peer on the same
work, in the same process, interleaved, and prints a table of medians and
the ratio ours / peer with the goal of each row; a full run writes
``book/benchmarks.json``, which the status page shows.  A ratio, not a time,
is the result: the machines are shared and absolute times drift.

=====================  =========================================================
``bench_gat``          GAT and GATv2 training epoch on Cora vs PyTorch Geometric
``bench_attention``    multi-head self-attention vs ``nn.MultiheadAttention`` and
                       ``F.scaled_dot_product_attention``: time and peak memory
``bench_gpt``          Chapter 11's GPT training step vs ``nn.TransformerEncoderLayer``
``bench_rnn``          LSTM / GRU layers vs ``nn.LSTM`` / ``nn.GRU`` (reported only)
``bench_grading``      batch grading of 30 submissions (goal: under 2 minutes)
``harness``            interleaved timing, peak memory, goals
``run``                the command line
``profile_ops``        where one case's time and memory go, op by op (``torch.profiler``)
=====================  =========================================================

No test asserts a time: ``tests/test_benchmarks.py`` runs ``--quick`` so the
command cannot rot, and checks the status page renders the table.
"""
