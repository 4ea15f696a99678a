"""Where the time and memory of one benchmark case go, op by op (``torch.profiler``).

::

    python -m benchmarks.profile_ops attention --T 512     # ours vs torch's three paths
    python -m benchmarks.profile_ops gpt                    # ours vs the nn.TransformerEncoderLayer GPT

For each side: the operators sorted by self CPU time over ``--calls`` calls
(after a warm-up), and, from one call with ``profile_memory``, the
operators that allocate the most (self CPU memory) and the peak of live
tensor bytes.  One thread, as in the benchmarks.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from benchmarks import bench_attention, bench_gpt
from benchmarks.harness import _quiet_stderr, peak_bytes


def _attention_case(t: int, b: int):
    width, heads = 256, 8
    torch.manual_seed(0)
    models = {
        "ours": bench_attention.Ours(width, heads),
        "nn.MultiheadAttention": bench_attention.TorchMHA(width, heads),
        "SDPA": bench_attention.SDPAAttention(width, heads),
    }
    bench_attention._copy(*models.values())
    x = torch.randn(b, t, width, requires_grad=True)
    grad = torch.randn(b, t, width)
    fns = {n: bench_attention.forward_backward(m, x, grad) for n, m in models.items()}
    return {**fns, "SDPA, math backend": bench_attention.math_backend(fns["SDPA"])}


def _gpt_case():
    vocab, width, heads, layers, block, batch = 65, 64, 4, 2, 64, 32
    torch.manual_seed(0)
    peer = bench_gpt.TorchGPT(vocab, width, heads, layers, block)
    ours = bench_gpt.ours_from(peer, vocab, width, heads, layers, block)
    tokens = torch.randint(vocab, (batch, block + 1))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step(model: nn.Module):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

        def call():
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten()).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        return call

    return {"ours": step(ours), "nn.TransformerEncoderLayer": step(peer)}


def report(name: str, fn, calls: int, rows: int) -> None:
    for _ in range(2):
        fn()
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    print(f"\n=== {name}: time, {calls} calls ===")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    print(
        f"=== {name}: memory, one call (peak of live tensors {peak_bytes(fn, torch.device('cpu')) / 2**20:.1f} MiB) ==="
    )
    print(prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_ops")
    parser.add_argument("case", choices=["attention", "gpt"])
    parser.add_argument("--T", type=int, default=512, help="attention: sequence length")
    parser.add_argument("--B", type=int, default=4, help="attention: batch size")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--rows", type=int, default=18)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    fns = _attention_case(args.T, args.B) if args.case == "attention" else _gpt_case()
    for name, fn in fns.items():
        report(name, fn, args.calls, args.rows)


if __name__ == "__main__":
    main()
