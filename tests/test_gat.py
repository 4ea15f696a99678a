"""course_lib.gat against PyTorch Geometric and its two forms against each other.

The sparse features are tested in test_sparse.py, the training loops in
test_gat_training.py, the time encoding in test_time_encoding.py.
"""

import pytest
import torch
from torch_geometric.nn import GATConv, GATv2Conv, GCNConv

from course_lib import gat, sparse

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
