"""course_lib.gat against PyTorch Geometric and its two forms against each other;
course_lib.sparse (sparse features) and course_lib.gat_training (training loops)."""

import pickle
import subprocess
import sys

import pytest
import torch
from torch_geometric.nn import GATConv, GATv2Conv, GCNConv

from course_lib import gat, gat_training, sparse
from course_lib.gat_training import Setup
from course_lib.time_encoding import time_encoding
from course_lib.training import Callback, train

N, F_IN = 7, 5


@pytest.fixture
def graph():
    """7 nodes, node 6 isolated, node 3 with a self-loop in the input, no duplicates."""
    torch.manual_seed(0)
    x = torch.randn(N, F_IN)
    edges = [(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 4), (4, 2), (5, 0), (0, 5), (3, 3)]
    return x, torch.tensor(edges).T


def copy_gat(layer: gat.GATLayer, ref: GATConv) -> None:
    with torch.no_grad():
        ref.lin.weight.copy_(layer.lin.weight)
        ref.att_src.copy_(layer.att_src)
        ref.att_dst.copy_(layer.att_dst)
        ref.bias.copy_(torch.randn_like(ref.bias))
        layer.bias.copy_(ref.bias)


def copy_gatv2(layer: gat.GATv2Layer, ref: GATv2Conv) -> None:
    with torch.no_grad():
        for name in ("lin_l", "lin_r"):
            getattr(ref, name).weight.copy_(getattr(layer, name).weight)
            getattr(layer, name).bias.copy_(torch.randn_like(getattr(layer, name).bias))
            getattr(ref, name).bias.copy_(getattr(layer, name).bias)
        ref.att.copy_(layer.att)
        ref.bias.copy_(torch.randn_like(ref.bias))
        layer.bias.copy_(ref.bias)


@pytest.mark.parametrize("concat", [True, False])
def test_gat_matches_pyg(graph, concat):
    x, edges = graph
    layer = gat.GATLayer(F_IN, 4, heads=3, concat=concat)
    ref = GATConv(F_IN, 4, heads=3, concat=concat, dropout=0.0, add_self_loops=True)
    copy_gat(layer, ref)
    out, (edges_used, alpha) = layer(x, edges, return_attention=True)
    ref_out, (ref_edges, ref_alpha) = ref(x, edges, return_attention_weights=True)
    assert out.shape == ((N, 12) if concat else (N, 4))
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    # the same attention weight on the same edge
    key = edges_used[0] * N + edges_used[1]
    ref_key = ref_edges[0] * N + ref_edges[1]
    torch.testing.assert_close(
        alpha[key.argsort()], ref_alpha[ref_key.argsort()], atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("concat", [True, False])
def test_gatv2_matches_pyg(graph, concat):
    x, edges = graph
    layer = gat.GATv2Layer(F_IN, 4, heads=3, concat=concat)
    ref = GATv2Conv(F_IN, 4, heads=3, concat=concat, dropout=0.0, add_self_loops=True)
    copy_gatv2(layer, ref)
    torch.testing.assert_close(layer(x, edges), ref(x, edges), atol=1e-5, rtol=0)


def test_gcn_matches_pyg(graph):
    x, edges = graph
    layer = gat.GCNLayer(F_IN, 3)
    ref = GCNConv(F_IN, 3)
    with torch.no_grad():
        ref.lin.weight.copy_(layer.lin.weight)
        ref.bias.copy_(torch.randn(3))
        layer.bias.copy_(ref.bias)
    torch.testing.assert_close(layer(x, edges), ref(x, edges), atol=1e-5, rtol=0)


@pytest.mark.parametrize("layer_cls", [gat.GATLayer, gat.GATv2Layer])
@pytest.mark.parametrize("loops", [True, False])
def test_sparse_equals_dense(graph, layer_cls, loops):
    x, edges = graph
    layer = layer_cls(F_IN, 4, heads=2, add_self_loops=loops)
    adj = gat.to_dense_adjacency(edges, N)
    out, (edges_used, alpha) = layer(x, edges, return_attention=True)
    dense, alpha_dense = layer.forward_dense(x, adj, return_attention=True)
    torch.testing.assert_close(out, dense, atol=1e-5, rtol=0)
    # each edge's weight is the dense matrix's entry [head, target, source]
    torch.testing.assert_close(
        alpha, alpha_dense[:, edges_used[1], edges_used[0]].T, atol=1e-6, rtol=0
    )
    # the weights into each node that has any neighbour sum to 1
    sums = alpha_dense.sum(-1)
    has = adj.any(1) | loops
    torch.testing.assert_close(sums[:, has], torch.ones_like(sums[:, has]))


def test_isolated_node(graph):
    x, edges = graph  # node 6 has no edge
    with_loops = gat.GATLayer(F_IN, 4, heads=2)
    out, (edges_used, alpha) = with_loops(x, edges, return_attention=True)
    own = (edges_used[1] == 6).nonzero().flatten()
    assert edges_used[0, own].tolist() == [6]  # attends to itself only ...
    torch.testing.assert_close(alpha[own], torch.ones(1, 2))  # ... with weight 1
    torch.testing.assert_close(out[6], with_loops.lin(x[6]) + with_loops.bias)
    no_loops = gat.GATLayer(F_IN, 4, heads=2, add_self_loops=False)
    with torch.no_grad():
        no_loops.bias.fill_(0.5)
    out = no_loops(x, edges)
    torch.testing.assert_close(out[6], torch.full((8,), 0.5))  # receives nothing: the bias
    torch.testing.assert_close(
        no_loops.forward_dense(x, gat.to_dense_adjacency(edges, N))[6], out[6]
    )


def test_self_loops_replaced(graph):
    _, edges = graph
    looped = gat.add_self_loops(edges, N)
    loops = looped[:, looped[0] == looped[1]]
    assert sorted(loops[0].tolist()) == list(range(N))  # exactly one per node (3 -> 3 not twice)


def test_duplicate_edges_count_twice(graph):
    x, edges = graph
    dup = torch.cat([edges, torch.tensor([[1], [0]])], dim=1)  # 1 -> 0 listed twice
    layer = gat.GATLayer(F_IN, 4, heads=2)
    ref = GATConv(F_IN, 4, heads=2)
    copy_gat(layer, ref)
    out = layer(x, dup)
    torch.testing.assert_close(out, ref(x, dup), atol=1e-5, rtol=0)  # a multiset, like PyG
    assert not torch.allclose(out[0], layer(x, edges)[0], atol=1e-4)  # node 0 changed ...
    torch.testing.assert_close(out[1:], layer(x, edges)[1:])  # ... and only node 0
    # the dense form sees each edge once; coalesce() makes the sparse form agree
    assert gat.coalesce(dup, N).shape[1] == edges.shape[1]
    dense = layer.forward_dense(x, gat.to_dense_adjacency(dup, N))
    torch.testing.assert_close(layer(x, gat.coalesce(dup, N)), dense, atol=1e-5, rtol=0)


def test_segment_softmax_is_stable():
    scores = torch.tensor([[1000.0], [1001.0], [-1000.0], [5.0]])
    index = torch.tensor([0, 0, 1, 2])
    alpha = gat.segment_softmax(scores, index, 4)
    assert torch.isfinite(alpha).all()
    torch.testing.assert_close(alpha[:2, 0], torch.softmax(torch.tensor([1000.0, 1001.0]), 0))
    torch.testing.assert_close(alpha[2:, 0], torch.ones(2))


def sparse_matrix(n=40, f=30, density=0.1, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, f, generator=gen)
    return x * (torch.rand(n, f, generator=gen) < density)


def test_sparse_features_layout():
    x = sparse_matrix()
    sf = sparse.SparseFeatures(x)
    assert sf.shape == x.shape and sf.values().numel() == x.count_nonzero()
    assert torch.equal(sf.to_dense(), x) and torch.equal(sf.csr_t.to_dense(), x.T)
    assert torch.equal(sparse.SparseFeatures(x.to_sparse()).to_dense(), x)
    new = sf.with_values(torch.arange(sf.values().numel(), dtype=torch.float))
    assert torch.equal(new.csr_t.to_dense(), new.to_dense().T)  # x^T follows the new values
    copy = pickle.loads(pickle.dumps(new))  # as sent to a worker process of fit_seeds
    assert torch.equal(copy.to_dense(), new.to_dense()) and torch.equal(copy.perm, new.perm)
    assert torch.equal(copy.csr_t.to_dense(), new.csr_t.to_dense())
    with pytest.raises(ValueError, match=r"x must be \[N, F_in\]"):
        sparse.SparseFeatures(torch.ones(3))


@pytest.mark.parametrize("first", ["build", "unpickle"])
def test_sparse_features_print_no_beta_notice(first):
    """PyTorch's "beta" notice for CSR tensors is silenced where they are built, and only there.

    The notice is printed once per process, so each way of making the first CSR tensor of a
    process (building, or receiving the features in a worker) needs a fresh interpreter.
    """
    data = pickle.dumps(sparse.SparseFeatures(sparse_matrix()))
    script = (
        "import pickle, sys, warnings\n"
        "import torch\n"
        "from course_lib import sparse\n"
        "x = torch.eye(4)\n"
        "sf = pickle.loads(sys.stdin.buffer.read()) if sys.argv[1] == 'unpickle' else "
        "sparse.SparseFeatures(x)\n"
        "sparse.dropout(sf.to('cpu'), 0.5)\n"
        "# and no filter left behind, at import or after\n"
        "assert not any(f[1] and 'CSR' in f[1].pattern for f in warnings.filters)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, first], input=data, capture_output=True, timeout=120
    )
    assert run.returncode == 0, run.stderr.decode()
    assert b"Sparse CSR tensor support is in beta" not in run.stderr


def test_sparse_linear_gradient():
    """x W^T and its gradient, with the stored transpose, equal the dense computation."""
    x = sparse_matrix()
    sf = sparse.dropout(sparse.SparseFeatures(x), 0.5)  # new values: the transpose must follow
    w = torch.randn(8, 30, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    grad = torch.randn(40, 8)
    sparse.linear(sf, w).backward(grad)
    (sf.to_dense() @ w_ref.T).backward(grad)
    torch.testing.assert_close(w.grad, w_ref.grad, atol=1e-5, rtol=0)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_dropout():
    torch.manual_seed(0)
    x = torch.ones(200, 500)
    out = sparse.dropout(x, 0.6)
    assert set(out.unique().tolist()) == {0.0, 2.5}  # dropped, or scaled by 1 / (1 - p)
    assert abs((out == 0).float().mean().item() - 0.6) < 0.01
    assert sparse.dropout(x, 0.6, training=False) is x and sparse.dropout(x, 0.0) is x
    assert not sparse.dropout(x, 1.0).any()
    matrix = sparse_matrix()
    for form in (sparse.SparseFeatures(matrix), matrix.to_sparse()):
        dropped = sparse.dropout(form, 0.5).to_dense()
        assert not dropped[matrix == 0].any()  # a zero stays zero
        kept = dropped[matrix != 0]
        assert set(torch.round(kept / matrix[matrix != 0], decimals=4).unique().tolist()) <= {0, 2}
    with pytest.raises(ValueError, match="p must be in"):
        sparse.dropout(x, 1.5)
    with pytest.raises(ValueError, match="SparseFeatures"):
        sparse.dropout(matrix.to_sparse_csr(), 0.5)  # the test builds a CSR tensor itself


def test_sparse_features_and_models(graph):
    x, edges = graph
    for model in (gat.GAT(F_IN, 3, hidden=2, heads=2), gat.GCN(F_IN, 4, 3), gat.MLP(F_IN, 4, 3)):
        model.eval()
        for form in (x.to_sparse(), sparse.SparseFeatures(x)):
            torch.testing.assert_close(model(form, edges), model(x, edges), atol=1e-5, rtol=0)
    model = gat.GAT(F_IN, 3, hidden=2, heads=2).eval()
    dense = model(x, gat.to_dense_adjacency(edges, N), dense=True)
    torch.testing.assert_close(dense, model(x, edges), atol=1e-5, rtol=0)


def test_gat_layer_choice(graph):
    x, edges = graph
    v1, v2 = gat.GAT(F_IN, 3, hidden=2, heads=2), gat.GAT(F_IN, 3, 2, 2, layer=gat.GATv2Layer)
    assert type(v1.conv1) is type(v1.conv2) is gat.GATLayer
    assert type(v2.conv1) is type(v2.conv2) is gat.GATv2Layer
    assert v2.eval()(x, edges).shape == (N, 3)
    with pytest.raises(ValueError, match="layer must be GATLayer or GATv2Layer"):
        gat.GAT(F_IN, 3, layer=gat.GCNLayer)


def test_errors(graph):
    x, edges = graph
    layer = gat.GATLayer(F_IN, 4)
    with pytest.raises(ValueError, match=r"x must be \[N, F_in=5\]"):
        layer(x[:, :3], edges)
    with pytest.raises(ValueError, match=r"x must be \[N, F_in=5\]"):
        layer(sparse.SparseFeatures(x[:, :3]), edges)
    with pytest.raises(ValueError, match=r"edge_index must be \[2, E\]"):
        layer(x, edges.T)
    with pytest.raises(ValueError, match="outside"):
        layer(x, edges + N)
    with pytest.raises(ValueError, match="adj must be a bool"):
        layer.forward_dense(x, torch.ones(N, N))
    with pytest.raises(ValueError, match=r"adj must be \[N=7, N=7\]"):
        layer.forward_dense(x, torch.ones(N, N - 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"index must be \[E=3\]"):
        gat.segment_softmax(torch.zeros(3, 2), torch.zeros(2, dtype=torch.long), 4)


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


def test_gcn_layer_runs_in_float64():
    """The degree vector follows the input's dtype (it was always float32, so float64 crashed)."""
    torch.manual_seed(0)
    layer = gat.GCNLayer(3, 2).double()
    edges = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    x = torch.randn(4, 3, dtype=torch.float64)
    out = layer(x, edges)
    assert out.dtype == torch.float64
    ref = GCNConv(3, 2).double()
    ref.lin.weight.data.copy_(layer.lin.weight)
    ref.bias.data.copy_(layer.bias)
    assert (out - ref(x, edges)).abs().max() < 1e-12


def test_time_encoding_depends_on_elapsed_time_and_is_time2vec_without_its_trend():
    """TGAT's Phi (14.6): inner products depend on t1 - t2 only; each (cos, sin) pair is
    Time2Vec's periodic part with phases pi/2 and 0 (weights copied)."""
    from course_lib.timeseries import Time2Vec

    torch.manual_seed(0)
    omega = torch.rand(6) * 3
    t = torch.tensor([0.0, 1.5, 4.0, 7.25])
    phi = time_encoding(t, omega)
    assert phi.shape == (4, 12)
    assert torch.allclose(phi.norm(dim=-1), torch.ones(4))  # |Phi(t)| = 1
    shifted = time_encoding(t + 3.7, omega)
    assert torch.allclose(phi @ phi.T, shifted @ shifted.T, atol=1e-5)  # only t1 - t2 counts
    expected = torch.cos(omega * (t[1] - t[2])).mean()
    assert torch.allclose(phi[1] @ phi[2], expected, atol=1e-6)
    t2v = Time2Vec(12)
    with torch.no_grad():
        t2v.w.copy_(omega.repeat_interleave(2))
        t2v.b.copy_(torch.tensor([torch.pi / 2, 0.0]).repeat(6))
    assert torch.allclose(t2v(t)[..., 1:] / 6**0.5, phi, atol=1e-6)
    with pytest.raises(ValueError, match=r"time_encoding: omega"):
        time_encoding(t, omega[None])
