"""course_lib.gat against PyTorch Geometric, and its two forms against each other."""

import subprocess
import sys

import pytest
import torch
from torch_geometric.nn import GATConv, GATv2Conv, GCNConv

from course_lib import gat

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
    x, ei = graph
    layer = gat.GATLayer(F_IN, 4, heads=3, concat=concat)
    ref = GATConv(F_IN, 4, heads=3, concat=concat, dropout=0.0, add_self_loops=True)
    copy_gat(layer, ref)
    out, (ei_used, alpha) = layer(x, ei, return_attention=True)
    ref_out, (ref_ei, ref_alpha) = ref(x, ei, return_attention_weights=True)
    assert out.shape == ((N, 12) if concat else (N, 4))
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    # the same attention weight on the same edge
    key = ei_used[0] * N + ei_used[1]
    ref_key = ref_ei[0] * N + ref_ei[1]
    torch.testing.assert_close(
        alpha[key.argsort()], ref_alpha[ref_key.argsort()], atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("concat", [True, False])
def test_gatv2_matches_pyg(graph, concat):
    x, ei = graph
    layer = gat.GATv2Layer(F_IN, 4, heads=3, concat=concat)
    ref = GATv2Conv(F_IN, 4, heads=3, concat=concat, dropout=0.0, add_self_loops=True)
    copy_gatv2(layer, ref)
    torch.testing.assert_close(layer(x, ei), ref(x, ei), atol=1e-5, rtol=0)


def test_gcn_matches_pyg(graph):
    x, ei = graph
    layer = gat.GCNLayer(F_IN, 3)
    ref = GCNConv(F_IN, 3)
    with torch.no_grad():
        ref.lin.weight.copy_(layer.lin.weight)
        ref.bias.copy_(torch.randn(3))
        layer.bias.copy_(ref.bias)
    torch.testing.assert_close(layer(x, ei), ref(x, ei), atol=1e-5, rtol=0)


@pytest.mark.parametrize("layer_cls", [gat.GATLayer, gat.GATv2Layer])
@pytest.mark.parametrize("loops", [True, False])
def test_sparse_equals_dense(graph, layer_cls, loops):
    x, ei = graph
    layer = layer_cls(F_IN, 4, heads=2, add_self_loops=loops)
    adj = gat.to_dense_adjacency(ei, N)
    out, (ei_used, alpha) = layer(x, ei, return_attention=True)
    dense, alpha_dense = layer.forward_dense(x, adj, return_attention=True)
    torch.testing.assert_close(out, dense, atol=1e-5, rtol=0)
    # each edge's weight is the dense matrix's entry [head, target, source]
    torch.testing.assert_close(alpha, alpha_dense[:, ei_used[1], ei_used[0]].T, atol=1e-6, rtol=0)
    # the weights into each node that has any neighbour sum to 1
    sums = alpha_dense.sum(-1)
    has = adj.any(1) | loops
    torch.testing.assert_close(sums[:, has], torch.ones_like(sums[:, has]))


def test_isolated_node(graph):
    x, ei = graph  # node 6 has no edge
    with_loops = gat.GATLayer(F_IN, 4, heads=2)
    out, (ei_used, alpha) = with_loops(x, ei, return_attention=True)
    own = (ei_used[1] == 6).nonzero().flatten()
    assert ei_used[0, own].tolist() == [6]  # attends to itself only ...
    torch.testing.assert_close(alpha[own], torch.ones(1, 2))  # ... with weight 1
    torch.testing.assert_close(out[6], with_loops.lin(x[6]) + with_loops.bias)
    no_loops = gat.GATLayer(F_IN, 4, heads=2, add_self_loops=False)
    with torch.no_grad():
        no_loops.bias.fill_(0.5)
    out = no_loops(x, ei)
    torch.testing.assert_close(out[6], torch.full((8,), 0.5))  # receives nothing: the bias
    torch.testing.assert_close(no_loops.forward_dense(x, gat.to_dense_adjacency(ei, N))[6], out[6])


def test_self_loops_replaced(graph):
    _, ei = graph
    looped = gat.add_self_loops(ei, N)
    loops = looped[:, looped[0] == looped[1]]
    assert sorted(loops[0].tolist()) == list(range(N))  # exactly one per node (3 -> 3 not twice)


def test_duplicate_edges_count_twice(graph):
    x, ei = graph
    dup = torch.cat([ei, torch.tensor([[1], [0]])], dim=1)  # 1 -> 0 listed twice
    layer = gat.GATLayer(F_IN, 4, heads=2)
    ref = GATConv(F_IN, 4, heads=2)
    copy_gat(layer, ref)
    out = layer(x, dup)
    torch.testing.assert_close(out, ref(x, dup), atol=1e-5, rtol=0)  # a multiset, like PyG
    assert not torch.allclose(out[0], layer(x, ei)[0], atol=1e-4)  # node 0 changed ...
    torch.testing.assert_close(out[1:], layer(x, ei)[1:])  # ... and only node 0
    # the dense form sees each edge once; coalesce() makes the sparse form agree
    assert gat.coalesce(dup, N).shape[1] == ei.shape[1]
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
    sf = gat.SparseFeatures(x)
    assert sf.shape == x.shape and sf.values().numel() == x.count_nonzero()
    assert torch.equal(sf.to_dense(), x) and torch.equal(sf.csr_t.to_dense(), x.T)
    assert torch.equal(gat.SparseFeatures(x.to_sparse()).to_dense(), x)
    new = sf.with_values(torch.arange(sf.values().numel(), dtype=torch.float))
    assert torch.equal(new.csr_t.to_dense(), new.to_dense().T)  # x^T follows the new values


def test_sparse_linear_gradient():
    """x W^T and its gradient, with the stored transpose, equal the dense computation."""
    x = sparse_matrix()
    sf = gat.dropout(gat.SparseFeatures(x), 0.5)  # new values: the transpose must follow
    w = torch.randn(8, 30, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    grad = torch.randn(40, 8)
    gat._linear(sf, w).backward(grad)
    (sf.to_dense() @ w_ref.T).backward(grad)
    torch.testing.assert_close(w.grad, w_ref.grad, atol=1e-5, rtol=0)


def test_dropout():
    torch.manual_seed(0)
    x = torch.ones(200, 500)
    out = gat.dropout(x, 0.6)
    assert set(out.unique().tolist()) == {0.0, 2.5}  # dropped, or scaled by 1 / (1 - p)
    assert abs((out == 0).float().mean().item() - 0.6) < 0.01
    assert gat.dropout(x, 0.6, training=False) is x and gat.dropout(x, 0.0) is x
    assert not gat.dropout(x, 1.0).any()
    sparse = sparse_matrix()
    for form in (gat.SparseFeatures(sparse), sparse.to_sparse()):
        dropped = gat.dropout(form, 0.5).to_dense()
        assert not dropped[sparse == 0].any()  # a zero stays zero
        kept = dropped[sparse != 0]
        assert set(torch.round(kept / sparse[sparse != 0], decimals=4).unique().tolist()) <= {0, 2}
    with pytest.raises(ValueError, match="p must be in"):
        gat.dropout(x, 1.5)
    with pytest.raises(ValueError, match="SparseFeatures"):
        gat.dropout(sparse.to_sparse_csr(), 0.5)


def test_sparse_features_and_models(graph):
    x, ei = graph
    for model in (gat.GAT(F_IN, 3, hidden=2, heads=2), gat.GCN(F_IN, 4, 3), gat.MLP(F_IN, 4, 3)):
        model.eval()
        for sparse in (x.to_sparse(), gat.SparseFeatures(x)):
            torch.testing.assert_close(model(sparse, ei), model(x, ei), atol=1e-5, rtol=0)
    model = gat.GAT(F_IN, 3, hidden=2, heads=2).eval()
    dense = model(x, gat.to_dense_adjacency(ei, N), dense=True)
    torch.testing.assert_close(dense, model(x, ei), atol=1e-5, rtol=0)


def test_errors(graph):
    x, ei = graph
    layer = gat.GATLayer(F_IN, 4)
    with pytest.raises(ValueError, match=r"x must be \[N, F=5\]"):
        layer(x[:, :3], ei)
    with pytest.raises(ValueError, match=r"edge_index must be \[2, E\]"):
        layer(x, ei.T)
    with pytest.raises(ValueError, match="outside"):
        layer(x, ei + N)
    with pytest.raises(ValueError, match="adj must be a bool"):
        layer.forward_dense(x, torch.ones(N, N))


def test_fit_node_classifier_learns():
    torch.manual_seed(0)
    y = torch.arange(20) % 2
    x = torch.nn.functional.one_hot(y, 2).float() + 0.1 * torch.randn(20, 2)
    ei = torch.tensor([[i, (i + 2) % 20] for i in range(20)]).T
    masks = (torch.arange(20) < 8, (torch.arange(20) >= 8) & (torch.arange(20) < 12))
    masks = (*masks, torch.arange(20) >= 12)
    res = gat.fit_node_classifier(
        gat.GAT(2, 2, hidden=4, heads=2), x, ei, y, masks, lr=0.05, max_epochs=50, progress=False
    )
    assert res.test_acc == 1.0 and 1 <= res.epochs <= 50


def small_task():
    torch.manual_seed(0)
    y = torch.arange(20) % 2
    x = torch.nn.functional.one_hot(y, 2).float() + 0.5 * torch.randn(20, 2)
    ei = torch.tensor([[i, (i + 2) % 20] for i in range(20)]).T
    idx = torch.arange(20)
    return x, ei, y, (idx < 8, (idx >= 8) & (idx < 12), idx >= 12)


def test_fit_seeds_same_in_workers_as_in_process():
    """Each run is seeded on its own, so spreading runs over processes changes no number."""
    train = dict(lr=0.05, max_epochs=30, patience=10)
    setups = {
        "GAT": (gat.GAT, dict(in_features=2, num_classes=2, hidden=4, heads=2), train),
        "MLP": (gat.MLP, dict(in_features=2, hidden=8, num_classes=2), train),
    }
    task = small_task()
    one = gat.fit_seeds(setups, [0, 1], *task, workers=1)
    two = gat.fit_seeds(setups, [0, 1], *task, workers=2)
    for name in setups:
        assert len(one[name]) == 2
        for a, b in zip(one[name], two[name], strict=True):
            assert a.history == b.history and (a.test_acc, a.best_epoch) == (
                b.test_acc,
                b.best_epoch,
            )
    assert one["GAT"][0].history != one["GAT"][1].history  # the seed matters


def test_fit_seeds_errors():
    task = small_task()
    with pytest.raises(ValueError, match="must be \\(model class"):
        gat.fit_seeds({"GAT": (gat.GAT, {}, 0.01)}, [0], *task)
    with pytest.raises(ValueError, match="unknown training arguments \\['epochs'\\]"):
        gat.fit_seeds({"MLP": (gat.MLP, {}, {"epochs": 5})}, [0], *task)


def test_fit_seeds_explains_a_missing_main_guard(tmp_path):
    """Spawned workers re-import a script; without the guard they die: the error says why."""
    script = tmp_path / "no_guard.py"
    script.write_text(
        "import torch\n"
        "from course_lib import gat\n"
        "x, ei, y = torch.randn(10, 3), torch.tensor([[0, 1], [1, 0]]), torch.arange(10) % 2\n"
        "i = torch.arange(10)\n"
        "masks = (i < 4, (i >= 4) & (i < 7), i >= 7)\n"
        "setup = (gat.MLP, dict(in_features=3, hidden=4, num_classes=2), dict(max_epochs=3))\n"
        "gat.fit_seeds({'MLP': setup}, [0, 1], x, ei, y, masks, workers=2)\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode != 0
    assert "call fit_seeds under `if __name__ == '__main__':`" in run.stderr
