"""Plant named mutants in ``course_lib``, one at a time, and report which the tests catch.

Run from the repository root::

    python tests/mutation_check.py            # every mutant
    python tests/mutation_check.py --list     # their names
    python tests/mutation_check.py sdpa-no-scale tanh-gelu-ffn
    python tests/mutation_check.py tanh-gelu-ffn --files test_bert.py   # other files

For each mutant the script copies ``course_lib/`` to a temporary directory, applies
one exact source replacement there (the original snippet must occur exactly once,
so a refactor that moves the code makes this script fail loudly instead of
silently testing nothing), and runs the fast test files named for that mutant::

    python -m pytest -x -q -p no:cacheprovider -p _mutation_probe <files>

with ``PYTHONPATH`` pointing at the mutated copy.  ``_mutation_probe`` is a small
pytest plugin written next to the copy: it imports ``course_lib`` from the copy
before pytest puts the repository on ``sys.path`` (so the copy is the one every
test imports) and, at the end of the session, writes the file of every
``course_lib`` module that was loaded; the script checks that each lies in the
copy.  A mutant is *caught* when pytest reports a failing test (exit status 1).
First the same files run on an unmutated copy: they must pass, or the table
would mean nothing.

Exit status: 0 if every mutant is caught, 1 if one survives (or a run errs),
2 if the unmutated baseline fails.  Only fast test files are used (no notebooks,
no training-heavy files such as test_gpt.py or test_seq2seq.py); a full run
takes a few minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "course_lib"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # inside course_lib/
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # test files (under tests/) expected to catch it
    what: str


MUTANTS = [
    Mutant(
        "sdpa-no-scale",
        "attention.py",
        "scale = 1.0 / math.sqrt(d_k) if scale is None else scale",
        "scale = 1.0 if scale is None else scale",
        ("test_attention.py",),
        "drop 1/sqrt(d_k) in scaled_dot_product_attention (3.2)",
    ),
    Mutant(
        "mask-flipped",
        "masks.py",
        'return scores.masked_fill(~mask, float("-inf"))',
        'return scores.masked_fill(mask, float("-inf"))',
        ("test_masks.py", "test_attention.py"),
        "a boolean mask removes the keys it should keep (masks._apply_mask)",
    ),
    Mutant(
        "no-zero-fully-masked-rows",
        "masks.py",
        "return weights.masked_fill(fully_masked, 0.0)  # (3.6)",
        "return weights  # (3.6) dropped:",
        ("test_masks.py", "test_attention.py"),
        "a fully masked row gets uniform weights instead of zeros (3.6)",
    ),
    Mutant(
        "causal-mask-ignored",
        "attention.py",
        'scores = scores.masked_fill(~causal, float("-inf"))',
        "scores = scores",
        ("test_attention.py",),
        "is_causal=True adds no mask (3.4)",
    ),
    Mutant(
        "lstm-gates-swapped",
        "rnn.py",
        "a_i, a_f, a_g, a_o = pre.chunk(4, dim=-1)",
        "a_f, a_i, a_g, a_o = pre.chunk(4, dim=-1)",
        ("test_rnn.py",),
        "LSTM input and forget gates read each other's weights (1.2)-(1.3)",
    ),
    Mutant(
        "gru-gates-swapped",
        "rnn.py",
        "x_r, x_z, x_n = gx.chunk(3, dim=-1)  # each [B, H]\n"
        "    h_r, h_z, h_n = gh.chunk(3, dim=-1)  # each [B, H]",
        "x_z, x_r, x_n = gx.chunk(3, dim=-1)  # each [B, H]\n"
        "    h_z, h_r, h_n = gh.chunk(3, dim=-1)  # each [B, H]",
        ("test_rnn.py",),
        "GRU reset and update gates read each other's weights (1.8)-(1.9)",
    ),
    Mutant(
        "attention-dropout-in-eval",
        "attention.py",
        "dropout_p=self.dropout if self.training else 0.0,",
        "dropout_p=self.dropout,",
        ("test_attention.py", "test_module_contracts.py"),
        "MultiHeadAttention drops attention weights in eval() too",
    ),
    Mutant(
        "q-k-swapped",
        "attention.py",
        "q, k, v = heads(query, w_q, b_q), heads(key, w_k, b_k), heads(value, w_v, b_v)",
        "k, q, v = heads(query, w_q, b_q), heads(key, w_k, b_k), heads(value, w_v, b_v)",
        ("test_attention.py",),
        "MultiHeadAttention swaps the projected queries and keys (3.5)",
    ),
    Mutant(
        "tanh-gelu-ffn",
        "transformer.py",
        '"gelu": F.gelu,',
        '"gelu": lambda u: F.gelu(u, approximate="tanh"),',
        ("test_vit.py", "test_bert.py", "test_transformer.py"),
        "the feed-forward's GELU is the tanh approximation (4.1)",
    ),
    Mutant(
        "pre-post-norm-swapped",
        "transformer.py",
        "if self.norm_first:  # (4.3) pre-norm",
        "if not self.norm_first:  # (4.3) pre-norm",
        ("test_transformer.py",),
        "EncoderBlock runs post-norm when asked for pre-norm and vice versa (4.2)-(4.3)",
    ),
    # The three bugs of issue 19, as regressions.
    Mutant(
        "from-torch-drops-dtype",
        "transformer.py",
        "    block.to(device=weight.device, dtype=weight.dtype)",
        "    pass  # mutant: block left in float32 on the CPU",
        ("test_module_contracts.py",),
        "EncoderBlock/DecoderBlock.from_torch return float32 for a float64 layer",
    ),
    Mutant(
        "from-torch-tanh-gelu-as-exact",
        "transformer.py",
        'return "gelu_tanh"',
        'return "gelu"',
        ("test_module_contracts.py",),
        "from_torch turns GELU(approximate='tanh') into exact GELU",
    ),
    Mutant(
        "gcn-float32-degree",
        "gat.py",
        "degree = torch.zeros(num_nodes, dtype=x.dtype, device=x.device)",
        "degree = torch.zeros(num_nodes, device=x.device)",
        ("test_module_contracts.py",),
        "GCNLayer's degree vector is always float32 (float64 input crashes)",
    ),
]

PROBE = '''\
"""pytest plugin written by tests/mutation_check.py: use the course_lib copy next to it."""

import json
import os
import sys

_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _DIR)
import course_lib  # noqa: E402  (cached in sys.modules before the repository is on sys.path)

sys.path.remove(_DIR)


def pytest_sessionfinish(session, exitstatus):
    files = {
        name: getattr(module, "__file__", None)
        for name, module in list(sys.modules.items())
        if name == "course_lib" or name.startswith("course_lib.")
    }
    with open(os.path.join(_DIR, "probe.json"), "w") as f:
        json.dump(files, f)
'''


def _copy_library(where: Path, mutant: Mutant | None) -> None:
    shutil.copytree(LIB, where / "course_lib", ignore=shutil.ignore_patterns("__pycache__"))
    (where / "_mutation_probe.py").write_text(PROBE)
    if mutant is None:
        return
    path = where / "course_lib" / mutant.file
    source = path.read_text()
    count = source.count(mutant.old)
    if count != 1:
        raise SystemExit(
            f"mutant {mutant.name}: the snippet occurs {count} times in course_lib/{mutant.file} "
            f"(expected exactly once), so the code it mutates has changed; update MUTANTS.\n"
            f"snippet: {mutant.old!r}"
        )
    path.write_text(source.replace(mutant.old, mutant.new))


def _first_failure(output: str) -> str:
    match = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
    return match.group(1).removeprefix("tests/") if match else ""


def run(mutant: Mutant | None, files: tuple[str, ...]) -> dict:
    """Run ``files`` against a copy of course_lib with ``mutant`` applied (None: unmutated)."""
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        where = Path(tmp).resolve()
        _copy_library(where, mutant)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(where), env.get("PYTHONPATH")]))
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
        cmd += ["-p", "_mutation_probe"] + [f"tests/{f}" for f in files]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        output = proc.stdout + proc.stderr
        probe = where / "probe.json"
        if not probe.exists():
            raise SystemExit(f"{cmd}: the probe plugin did not run\n{output[-3000:]}")
        loaded = json.loads(probe.read_text())
        outside = {n: f for n, f in loaded.items() if f and not f.startswith(str(where) + os.sep)}
        if "course_lib" not in loaded or outside:
            raise SystemExit(
                f"the tests did not import the mutated copy in {where}: {outside or loaded}"
            )
        return {
            "rc": proc.returncode,
            "seconds": seconds,
            "failure": _first_failure(output),
            "output": output,
            "course_lib": loaded["course_lib"].replace(str(where), "<copy>"),
            "modules": len(loaded),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--files", nargs="+", metavar="FILE", help="run these test files (under tests/) instead"
    )
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTANTS:
            print(f"{m.name:32} course_lib/{m.file:16} {m.what}")
        return 0
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutants {sorted(unknown)}; see --list")
    mutants = [m for m in MUTANTS if not args.names or m.name in args.names]
    if args.files:
        mutants = [dataclasses.replace(m, tests=tuple(args.files)) for m in mutants]

    files = tuple(dict.fromkeys(f for m in mutants for f in m.tests))
    print(f"baseline: {' '.join(files)} on an unmutated copy ...", flush=True)
    base = run(None, files)
    print(
        f"  rc={base['rc']} in {base['seconds']:.1f} s; course_lib imported from "
        f"{base['course_lib']} ({base['modules']} course_lib modules, all from the copy)"
    )
    if base["rc"] != 0:
        print(base["output"][-4000:])
        print("the unmutated tests fail: fix them before reading mutants", file=sys.stderr)
        return 2

    rows, survived, errors, total = [], [], [], time.perf_counter()
    for m in mutants:
        print(f"{m.name} ...", flush=True)
        r = run(m, m.tests)
        caught = {0: "no", 1: "yes"}.get(r["rc"], f"error (rc {r['rc']})")
        if r["rc"] == 0:
            survived.append(m.name)
        elif r["rc"] != 1:
            errors.append(m.name)
            print(r["output"][-3000:])
        rows.append((m.name, " ".join(m.tests), caught, f"{r['seconds']:.1f}", r["failure"]))

    header = ("mutant", "files run", "caught", "seconds", "first failing test")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    line = " | ".join(f"{{:{w}}}" for w in widths)
    print()
    print(line.format(*header).rstrip())
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(line.format(*row).rstrip())
    print(
        f"\n{len(rows) - len(survived) - len(errors)} of {len(rows)} mutants caught "
        f"in {time.perf_counter() - total:.0f} s (baseline {base['seconds']:.0f} s)"
    )
    if survived:
        print(f"SURVIVED: {', '.join(survived)}")
    if errors:
        print(f"ERRORS: {', '.join(errors)}")
    return 1 if survived or errors else 0


if __name__ == "__main__":
    sys.exit(main())
