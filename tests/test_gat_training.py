"""Chapter 14: training node classifiers (the papers' early-stopping rules, weight decay
on the first layer, seeds run in worker processes).

Covers course_lib.gat_training; the layers and models are tested in test_gat.py.
"""

import subprocess
import sys

import pytest
import torch

from course_lib import gat, gat_training, sparse
from course_lib.gat_training import Setup
from course_lib.training import Callback, train


def test_fit_node_classifier_learns():
    torch.manual_seed(0)
    y = torch.arange(20) % 2
    x = torch.nn.functional.one_hot(y, 2).float() + 0.1 * torch.randn(20, 2)
    edges = torch.tensor([[i, (i + 2) % 20] for i in range(20)]).T
    masks = (torch.arange(20) < 8, (torch.arange(20) >= 8) & (torch.arange(20) < 12))
    masks = (*masks, torch.arange(20) >= 12)
    res = gat_training.fit_node_classifier(
        gat.GAT(2, 2, hidden=4, heads=2), x, edges, y, masks, lr=0.05, max_epochs=50, progress=False
    )
    assert isinstance(res, gat_training.FitResult)
    assert res.test_acc == 1.0 and 1 <= res.epochs <= 50


def test_paper_early_stopping():
    """Stop after `patience` epochs without a new best loss or accuracy; keep the last epoch
    that improved both.  Run inside the course's loop, with validation results scripted."""
    results = iter(
        [(1.0, 0.5), (0.9, 0.6), (0.8, 0.5), (0.95, 0.55), (0.85, 0.6), (0.9, 0.4), (2.0, 0.0)]
    )
    model = torch.nn.Linear(1, 1, bias=False)
    seen = []

    def validate(m):
        seen.append(m.weight.item())
        return next(results)

    stopping = gat_training.PaperEarlyStopping(validate, patience=2)
    losses = train(
        model,
        lambda: None,
        lambda m, _: m.weight.sum() * 0 + 1.0,  # a constant loss: the weights are set below
        100,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.0),
        callbacks=[stopping, _SetWeightToStep()],
        progress=False,
    )
    # epoch 2: new best loss only; 4: accuracy ties the best (a tie counts); 3 and 5: neither;
    # 6: the second epoch in a row without news -> stop
    assert len(losses) == 7 and stopping.best_epoch == 1
    assert stopping.history["val_loss"] == [1.0, 0.9, 0.8, 0.95, 0.85, 0.9, 2.0]
    assert model.weight.item() == 1.0  # the weights of epoch 1, restored
    with pytest.raises(ValueError, match="patience"):
        gat_training.PaperEarlyStopping(validate, patience=0)


def test_window_early_stopping():
    """Kipf & Welling: stop after `patience` epochs without a lower validation loss (accuracy
    ignored); the last weights stay."""
    results = iter([(1.0, 0.5), (0.9, 0.1), (0.95, 0.9), (0.9, 0.9), (0.8, 0.0), (0.8, 0.0)])
    results = iter([*results, (0.85, 0.0), (0.7, 0.0)])
    model = torch.nn.Linear(1, 1, bias=False)
    stopping = gat_training.WindowEarlyStopping(lambda m: next(results), patience=2)
    losses = train(
        model,
        lambda: None,
        lambda m, _: m.weight.sum() * 0 + 1.0,
        100,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.0),
        callbacks=[stopping, _SetWeightToStep()],
        progress=False,
    )
    # epochs 2 and 3 bring no lower loss (0.9 ties): stop after epoch 3; epoch 5 (0.8 ties)
    # never comes
    assert len(losses) == 4 and stopping.best_epoch == 3
    assert model.weight.item() == 3.0  # the last weights, not restored
    with pytest.raises(ValueError, match="patience"):
        gat_training.WindowEarlyStopping(lambda m: (0.0, 0.0), patience=0)


def test_weight_decay_on_the_first_layer_only():
    """With lr 0 nothing moves, so compare the Adam groups' weight decay directly."""
    torch.manual_seed(0)
    x, edges = torch.randn(6, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])
    y, idx = torch.arange(6) % 2, torch.arange(6)
    masks = (idx < 2, (idx >= 2) & (idx < 4), idx >= 4)
    model = gat.GCN(3, 4, 2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    gat_training.fit_node_classifier(
        model,
        x,
        edges,
        y,
        masks,
        lr=0.1,
        weight_decay=1.0,
        max_epochs=1,
        patience=None,
        decay_first_layer_only=True,
        progress=False,
    )
    assert not torch.equal(before["conv1.lin.weight"], model.conv1.lin.weight)
    with pytest.raises(ValueError, match="stopping must be 'gat' or 'gcn'"):
        gat_training.fit_node_classifier(model, x, edges, y, masks, stopping="kipf", progress=False)


class _SetWeightToStep(Callback):
    """Before the next validation, set the weight to the number of the epoch just finished."""

    order = -1

    def on_step(self, run):
        with torch.no_grad():
            run.model.weight.fill_(run.step - 1)


def small_task():
    torch.manual_seed(0)
    y = torch.arange(20) % 2
    x = torch.nn.functional.one_hot(y, 2).float() + 0.5 * torch.randn(20, 2)
    edges = torch.tensor([[i, (i + 2) % 20] for i in range(20)]).T
    idx = torch.arange(20)
    return x, edges, y, (idx < 8, (idx >= 8) & (idx < 12), idx >= 12)


def test_fit_seeds_same_in_workers_as_in_process():
    """Each run is seeded on its own, so spreading runs over processes changes no number."""
    train = dict(lr=0.05, max_epochs=30, patience=10)
    setups = {
        "GAT": Setup(gat.GAT, dict(in_features=2, num_classes=2, hidden=4, heads=2), train),
        "MLP": Setup(gat.MLP, dict(in_features=2, hidden=8, num_classes=2), train),
    }
    x, *task = small_task()
    features = sparse.SparseFeatures(x)  # the workers receive sparse features, as in ch14
    one = gat_training.fit_seeds(setups, [0, 1], features, *task, workers=1)
    two = gat_training.fit_seeds(setups, [0, 1], features, *task, workers=2)
    for name in setups:
        assert len(one[name]) == 2
        for a, b in zip(one[name], two[name], strict=True):
            assert a.history == b.history and (a.test_acc, a.best_epoch) == (
                b.test_acc,
                b.best_epoch,
            )
    assert one["GAT"][0].history != one["GAT"][1].history  # the seed matters


def test_setup_errors():
    task = small_task()
    with pytest.raises(TypeError, match=r"must be a Setup\(model, model_kwargs, fit_kwargs\)"):
        gat_training.fit_seeds({"GAT": (gat.GAT, {}, {})}, [0], *task)
    with pytest.raises(TypeError, match="fit_kwargs must be a dict"):
        Setup(gat.GAT, {}, 0.01)
    with pytest.raises(TypeError, match="model must be an nn.Module class"):
        Setup(gat.GAT(2, 2), {})
    with pytest.raises(ValueError, match="unknown training arguments \\['epochs'\\]"):
        Setup(gat.MLP, {}, {"epochs": 5})


def test_fit_seeds_explains_a_missing_main_guard(tmp_path):
    """Spawned workers re-import a script; without the guard they die: the error says why."""
    script = tmp_path / "no_guard.py"
    script.write_text(
        "import torch\n"
        "from course_lib import gat\n"
        "from course_lib.gat_training import Setup, fit_seeds\n"
        "x, edges, y = torch.randn(10, 3), torch.tensor([[0, 1], [1, 0]]), torch.arange(10) % 2\n"
        "i = torch.arange(10)\n"
        "masks = (i < 4, (i >= 4) & (i < 7), i >= 7)\n"
        "setup = Setup(gat.MLP, dict(in_features=3, hidden=4, num_classes=2), dict(max_epochs=3))\n"
        "fit_seeds({'MLP': setup}, [0, 1], x, edges, y, masks, workers=2)\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode != 0
    assert "call fit_seeds under `if __name__ == '__main__':`" in run.stderr


# ---------------------------------------------------------------------------
# Receptive fields (training and validating a GAT on the part of the graph it reads)
# ---------------------------------------------------------------------------


def test_receptive_field_of_a_path():
    """Path 0 - 1 - 2 - 3 - 4 (both directions); two layers at node 0 read nodes 0, 1, 2."""
    path = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]])
    field = gat_training.receptive_field(path, torch.arange(5) == 0)
    assert field.nodes.tolist() == [0, 1, 2] and field.targets.tolist() == [0]
    assert field.num_targets == (2, 1)  # layer 1's outputs at nodes 0 and 1, layer 2's at 0
    first, second = (e.T.tolist() for e in field.edges)
    assert sorted(first) == [[0, 1], [1, 0], [2, 1]]  # the edges into nodes 0 and 1
    assert second == [[1, 0]]  # the edge into node 0
    assert len(gat_training.receptive_field(path, torch.arange(5) == 0, hops=1).nodes) == 2


@pytest.mark.parametrize("layer", [gat.GATLayer, gat.GATv2Layer])
@pytest.mark.parametrize("form", ["dense", "sparse"])
def test_receptive_field_gives_the_same_outputs_and_gradients(layer, form):
    torch.manual_seed(0)
    n = 60
    edges = gat.coalesce(torch.randint(0, n, (2, 150)), n)
    x = torch.rand(n, 12) * (torch.rand(n, 12) < 0.3)
    inputs = sparse.SparseFeatures(x) if form == "sparse" else x
    y, mask = torch.randint(0, 3, (n,)), torch.rand(n) < 0.2
    model = gat.GAT(12, 3, hidden=4, heads=2, dropout=0.0, layer=layer)
    field = gat_training.receptive_field(edges, mask)
    assert len(field.nodes) < n  # the test reads a part of the graph
    part = inputs.rows(field.nodes) if form == "sparse" else x[field.nodes]
    outputs, grads = [], []
    assert field.targets.tolist() == list(range(int(mask.sum())))  # the mask's nodes first
    assert field.num_targets[1] == int(mask.sum()) < field.num_targets[0] < len(field.nodes)
    trimmed = model(part, field.edges, num_targets=field.num_targets)  # [T, K]: no other output
    assert trimmed.shape == (int(mask.sum()), 3)
    for logits in (
        model(inputs, edges)[mask],
        model(part, field.edges)[field.targets],
        trimmed,
    ):
        model.zero_grad()
        torch.nn.functional.cross_entropy(logits, y[mask]).backward()
        outputs.append(logits.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    for other in outputs[1:]:
        assert torch.allclose(outputs[0], other, atol=1e-6)
    for full, *restricted in zip(*grads, strict=True):
        assert all(torch.allclose(full, r, atol=1e-6) for r in restricted)


def test_receptive_field_orders_the_nodes_by_the_layer_that_needs_them():
    """Targets first (in mask order), then the other nodes whose first-layer output is read,
    then the inputs only; every layer's edges end at the nodes it computes."""
    torch.manual_seed(1)
    n = 80
    edges = gat.coalesce(torch.randint(0, n, (2, 200)), n)
    mask = torch.rand(n) < 0.1
    field = gat_training.receptive_field(edges, mask)
    t1, t2 = field.num_targets
    assert field.nodes[:t2].tolist() == mask.nonzero().squeeze(1).tolist()
    read = torch.zeros(n, dtype=torch.bool)
    read[field.nodes[field.edges[1][0]]] = True  # the sources of the last layer's edges
    assert set(field.nodes[:t1].tolist()) == set((read | mask).nonzero().squeeze(1).tolist())
    assert int(field.edges[0][1].max()) < t1 and int(field.edges[1][1].max()) < t2
    assert int(field.edges[1][0].max()) < t1  # layer 2 reads layer 1's outputs only


def test_fit_on_receptive_fields_changes_no_number():
    """Without dropout, training a GAT on the receptive fields follows the whole-graph run."""
    x, *task = small_task()
    results = []
    for fields in (True, False):
        torch.manual_seed(0)
        model = gat.GAT(2, 2, hidden=4, heads=2, dropout=0.0)
        results.append(
            gat_training.fit_node_classifier(
                model, x, *task, lr=0.05, max_epochs=30, patience=10, progress=False,
                receptive_fields=fields,
            )
        )  # fmt: skip
    a, b = results
    assert (a.test_acc, a.best_epoch, a.epochs) == (b.test_acc, b.best_epoch, b.epochs)
    # The two runs sum the same float32 terms in a different order. Once a loss is
    # near 1e-4 it is -log(p) with p a rounding step (6e-8) from 1, so its relative
    # error is about 1e-3: compare on the absolute scale of float32 rounding near 1
    # (measured here: at most 3e-8 apart, against losses of 1e-4 to 0.2).
    for key in ("train_loss", "val_loss", "val_acc"):
        assert torch.allclose(
            torch.tensor(a.history[key]), torch.tensor(b.history[key]), rtol=1e-5, atol=1e-6
        )
