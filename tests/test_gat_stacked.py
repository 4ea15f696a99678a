"""course_lib.gat_stacked: S seeds as one model compute each seed's own model (Chapter 14)."""

import pytest
import torch

from course_lib import gat, gat_stacked, gat_training, sparse


def _graph(n=12, f=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, f, generator=g) < 0.3).float()
    edges = gat.coalesce(torch.randint(n, (2, 30), generator=g), n)
    edges = edges[:, edges[0] != edges[1]]
    return x, edges


MODELS = {
    "MLP": lambda: gat.MLP(9, 8, 3),
    "GCN": lambda: gat.GCN(9, 8, 3),
    "GAT": lambda: gat.GAT(9, 3, hidden=4, heads=2),
    "GATv2": lambda: gat.GAT(9, 3, hidden=4, heads=2, layer=gat.GATv2Layer),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_stacked_equals_each_model(name):
    x, edges = _graph()
    models = []
    for s in range(3):
        torch.manual_seed(s)
        models.append(MODELS[name]().eval())
    stacked = gat_stacked.StackedNodeModel(models).eval()
    out = stacked(gat_stacked.block_features(x, 3), edges)  # [N, S, K]
    for s, m in enumerate(models):
        assert torch.allclose(out[:, s], m(x, edges), atol=1e-5)


def test_block_features_layout():
    x, _ = _graph()
    block = gat_stacked.block_features(x, 2)
    dense = block.to_dense()
    assert dense.shape == (24, 18)
    assert torch.equal(dense[0::2, :9], x) and torch.equal(dense[1::2, 9:], x)
    assert dense[0::2, 9:].abs().sum() == 0
    assert torch.equal(block.csr_t.to_dense(), dense.T)
    w = torch.randn(5, 18, requires_grad=True)  # the backward uses the stored transpose
    sparse.linear(block, w).sum().backward()
    w2 = w.detach().clone().requires_grad_()
    (dense @ w2.T).sum().backward()
    assert torch.allclose(w.grad, w2.grad, atol=1e-5)


def _task():
    x, edges = _graph(n=40, seed=1)
    y = (x[:, 0] > 0).long()
    ids = torch.arange(40)
    return x, edges, y, (ids < 20, (ids >= 20) & (ids < 30), ids >= 30)


def _models(make, seeds):
    models = []
    for s in seeds:
        torch.manual_seed(s)
        models.append(make())
    return models


def test_gat_rule_equals_separate_runs():
    """Without dropout training is deterministic: stacked seeds = separate runs, epoch for epoch."""
    x, edges, y, masks = _task()
    make = lambda: gat.GAT(9, 2, hidden=4, heads=2, dropout=0.0)  # noqa: E731
    stacked = gat_stacked.StackedNodeModel(_models(make, [0, 1]))
    kw = dict(lr=0.01, weight_decay=5e-4, max_epochs=150, patience=20)
    together = gat_stacked.fit_stacked(
        stacked, gat_stacked.block_features(x, 2), edges, y, masks, **kw
    )
    for model, res in zip(_models(make, [0, 1]), together, strict=True):
        alone = gat_training.fit_node_classifier(model, x, edges, y, masks, progress=False, **kw)
        assert (res.epochs, res.best_epoch) == (alone.epochs, alone.best_epoch)
        assert abs(res.test_acc - alone.test_acc) < 1e-6


def test_gcn_rule_stops_and_keeps_the_last_weights():
    x, edges, y, masks = _task()
    stacked = gat_stacked.StackedNodeModel(_models(lambda: gat.GCN(9, 8, 2), [0, 1]))
    kw = dict(lr=0.05, weight_decay=5e-4, max_epochs=500, patience=10)
    res = gat_stacked.fit_stacked(
        stacked,
        gat_stacked.block_features(x, 2),
        edges,
        y,
        masks,
        stopping="gcn",
        decay_first_layer_only=True,
        **kw,
    )
    assert all(r.epochs < 500 and r.best_epoch == r.epochs - 1 for r in res)
    with pytest.raises(ValueError, match="stopping must be"):
        gat_stacked.fit_stacked(
            stacked,
            gat_stacked.block_features(x, 2),
            edges,
            y,
            masks,
            lr=0.01,
            weight_decay=0,
            max_epochs=1,
            patience=1,
            stopping="x",
        )
