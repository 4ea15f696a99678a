"""GAT and GATv2 on Cora, one training epoch: ``course_lib.gat`` vs PyTorch Geometric.

The paper's configuration, as Chapter 14 builds it: row-normalised features,
8 heads of 8 hidden units, ELU, dropout 0.6 on the inputs and on the attention
weights of both layers, one averaged output head, Adam (lr 0.005, weight decay
5e-4), the loss on the 140 training nodes.  Ours takes the features as
:class:`course_lib.sparse.SparseFeatures` (as the chapter does); PyG's
``GATConv`` / ``GATv2Conv`` take the dense matrix, as in PyG's own GAT example.
An epoch is zero_grad, forward, loss, backward and the optimizer step.
Before timing, the weights are copied from ours to PyG's and the two models'
outputs (dropout off) are checked equal.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness import Config, compare, time_side_by_side
from course_lib import gat
from course_lib.sparse import SparseFeatures

GOAL = 0.5  # issue 18: the GAT epoch stays at most 0.5x PyG's


class PygGAT(nn.Module):
    """The same two-layer model from PyG's convolutions (dropout as in ``course_lib.gat.GAT``)."""

    def __init__(self, conv, in_features, num_classes, hidden=8, heads=8, dropout=0.6):
        super().__init__()
        self.conv1 = conv(in_features, hidden, heads=heads, dropout=dropout)
        self.conv2 = conv(heads * hidden, num_classes, heads=1, concat=False, dropout=dropout)
        self.dropout = dropout

    def forward(self, x, edge_index):
        x = F.dropout(x, self.dropout, self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, self.dropout, self.training)
        return self.conv2(x, edge_index)


@torch.no_grad()
def copy_weights(ours: gat.GAT, theirs: PygGAT) -> None:
    for mine, other in ((ours.conv1, theirs.conv1), (ours.conv2, theirs.conv2)):
        for name, p in other.named_parameters():
            p.copy_(mine.get_parameter(name))


def _graph(cfg: Config):
    """Cora (row-normalised features), or a small random graph of the same kind for --quick."""
    if cfg.quick:
        g = torch.Generator().manual_seed(0)
        n, f, k, e = 60, 40, 3, 240
        x = (torch.rand(n, f, generator=g) < 0.1).float()
        edges = gat.coalesce(torch.randint(n, (2, e), generator=g), n)
        edges = edges[:, edges[0] != edges[1]]
        y = torch.randint(k, (n,), generator=g)
        train = torch.zeros(n, dtype=torch.bool)
        train[:20] = True
        return x, edges, y, train, k, f"random graph N={n}, E={edges.shape[1]}, F_in={f}"
    from course_lib import data

    cora = data.cora()
    x = cora.x / cora.x.sum(1, keepdim=True).clamp(min=1)
    size = f"Cora N={cora.num_nodes}, E={cora.num_edges}, F_in={cora.x.shape[1]}"
    return x, cora.edge_index, cora.y, cora.train_mask, cora.num_classes, size


def run(cfg: Config) -> list[dict]:
    from torch_geometric.nn import GATConv, GATv2Conv

    dev = cfg.device
    x, edge_index, y, train_mask, num_classes, size = _graph(cfg)
    x, edge_index, y, train_mask = (t.to(dev) for t in (x, edge_index, y, train_mask))
    features = SparseFeatures(x).to(dev)
    rows = []
    for label, layer, conv in (
        ("GAT", gat.GATLayer, GATConv),
        ("GATv2", gat.GATv2Layer, GATv2Conv),
    ):
        torch.manual_seed(0)
        ours = gat.GAT(x.shape[1], num_classes, layer=layer).to(dev)
        theirs = PygGAT(conv, x.shape[1], num_classes).to(dev)
        copy_weights(ours, theirs)
        ours.eval(), theirs.eval()
        with torch.no_grad():
            torch.testing.assert_close(ours(features, edge_index), theirs(x, edge_index))
        ours.train(), theirs.train()

        def epoch(model, inputs, opt):
            def step():
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(inputs, edge_index)[train_mask], y[train_mask])
                loss.backward()
                opt.step()

            return step

        opts = [
            torch.optim.Adam(m.parameters(), lr=0.005, weight_decay=5e-4) for m in (ours, theirs)
        ]
        times, repeats = time_side_by_side(
            {"ours": epoch(ours, features, opts[0]), "peer": epoch(theirs, x, opts[1])}, cfg
        )
        rows.append(
            {
                "group": "GAT",
                "what": f"{label} training epoch (8 heads x 8, dropout 0.6)",
                "size": size,
                "ours": f"course_lib.gat.GAT(layer={layer.__name__}), sparse features",
                "peer": f"PyG {conv.__name__}, dense features",
                "metric": "time",
                "repeats": repeats,
                "goal_ratio": GOAL,
                **compare(times, "ours", "peer"),
            }
        )
    return rows
