"""course_lib.gat against PyTorch Geometric and its two forms against each other.

The sparse features are tested in test_sparse.py, the training loops in
test_gat_training.py, the time encoding in test_time_encoding.py.
"""

import pytest
import torch
from torch_geometric.nn import GATConv, GATv2Conv, GCNConv

from course_lib import gat, sparse
from tests.conftest import default_device

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
    with pytest.raises(ValueError, match=r"^GATLayer: x must be \[N, F_in=5\]"):
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


# --- gaps found by mutation testing (mutmut) -----------------------------------------


def test_two_layer_models_match_pyg_and_torch(graph):
    """GCN against PyG's two-layer GCN; GAT against two GATConv with ELU between (the
    paper's model); MLP against nn.Sequential; all in eval mode, weights copied."""
    from torch_geometric.nn.models import GCN as PygGCN

    x, edges = graph
    torch.manual_seed(1)
    ours = gat.GCN(F_IN, 6, 3).eval()
    ref = PygGCN(F_IN, 6, num_layers=2, out_channels=3).eval()
    with torch.no_grad():
        for mine, theirs in ((ours.conv1, ref.convs[0]), (ours.conv2, ref.convs[1])):
            theirs.lin.weight.copy_(mine.lin.weight)
            mine.bias.normal_()
            theirs.bias.copy_(mine.bias)
    torch.testing.assert_close(ours(x, edges), ref(x, edges), atol=1e-5, rtol=0)

    model = gat.GAT(F_IN, 3, hidden=4, heads=2, out_heads=2).eval()
    conv1 = GATConv(F_IN, 4, heads=2)
    conv2 = GATConv(8, 3, heads=2, concat=False)
    copy_gat(model.conv1, conv1)
    copy_gat(model.conv2, conv2)
    with torch.no_grad():
        ref_out = conv2(torch.nn.functional.elu(conv1(x, edges)), edges)
    torch.testing.assert_close(model(x, edges), ref_out, atol=1e-5, rtol=0)
    adj = gat.to_dense_adjacency(edges, N)
    torch.testing.assert_close(model(x, adj, dense=True), ref_out, atol=1e-5, rtol=0)
    torch.testing.assert_close(model(x.to_sparse(), adj, dense=True), ref_out, atol=1e-5, rtol=0)

    mlp = gat.MLP(F_IN, 6, 3).eval()
    seq = torch.nn.Sequential(mlp.lin1, torch.nn.ReLU(), mlp.lin2)
    torch.testing.assert_close(mlp(x), seq(x))


def test_gat_defaults_are_the_papers():
    """Velickovic et al. (2018) on Cora: 8 heads of 8 features, one output head
    (averaged), dropout 0.6 on the inputs and the attention weights, LeakyReLU 0.2."""
    model = gat.GAT(10, 3)
    assert model.conv1.lin.weight.shape == (64, 10)
    assert model.conv2.lin.weight.shape == (3, 64) and model.conv2.concat is False
    assert model.dropout == model.conv1.dropout == model.conv2.dropout == 0.6
    assert model.conv1.negative_slope == GATConv(10, 8).negative_slope == 0.2
    assert gat.GATv2Layer(10, 8).negative_slope == GATv2Conv(10, 8).negative_slope
    assert gat.MLP(10, 4, 3).dropout == gat.GCN(10, 4, 3).dropout == 0.5  # Kipf & Welling


@pytest.mark.parametrize("layer_cls", [gat.GATLayer, gat.GATv2Layer])
def test_attention_dropout_in_training_only(graph, layer_cls):
    """Dropout 1 drops every attention weight while training: each node receives nothing
    and its output is the bias; in eval mode the weights are kept."""
    x, edges = graph
    layer = layer_cls(F_IN, 4, heads=2, dropout=1.0)
    with torch.no_grad():
        layer.bias.normal_()
    adj = gat.to_dense_adjacency(edges, N)
    for out in (layer(x, edges), layer.forward_dense(x, adj)):
        torch.testing.assert_close(out, layer.bias.expand(N, 8))
    layer.eval()
    assert not torch.allclose(layer(x, edges), layer.bias.expand(N, 8))
    torch.testing.assert_close(layer(x, edges), layer.forward_dense(x, adj), atol=1e-5, rtol=0)


def test_models_drop_inputs_while_training(graph):
    """Dropout 1 on the inputs while training: an MLP sees zeros and returns its last
    bias; a GCN or GAT (attention dropout aside) returns its last layer's bias."""
    x, edges = graph
    mlp = gat.MLP(F_IN, 6, 3, dropout=1.0)
    torch.testing.assert_close(mlp(x), mlp.lin2.bias.expand(N, 3))
    gcn = gat.GCN(F_IN, 6, 3, dropout=1.0)
    with torch.no_grad():
        gcn.conv2.bias.normal_()
        gcn.conv1.bias.normal_()  # without the dropout between the layers this would pass
    torch.testing.assert_close(gcn(x, edges), gcn.conv2.bias.expand(N, 3))
    model = gat.GAT(F_IN, 3, hidden=4, heads=2, dropout=1.0)
    with torch.no_grad():
        model.conv1.bias.normal_()
        model.conv2.bias.normal_()
    for out in (model(x, edges), model(x, gat.to_dense_adjacency(edges, N), dense=True)):
        torch.testing.assert_close(out, model.conv2.bias.expand(N, 3))


def test_layers_without_bias_match_pyg(graph):
    x, edges = graph
    layer = gat.GCNLayer(F_IN, 3, bias=False)
    assert layer.bias is None
    ref = GCNConv(F_IN, 3, bias=False)
    with torch.no_grad():
        ref.lin.weight.copy_(layer.lin.weight)
    torch.testing.assert_close(layer(x, edges), ref(x, edges), atol=1e-5, rtol=0)
    v1 = gat.GATLayer(F_IN, 4, heads=2, bias=False)
    ref1 = GATConv(F_IN, 4, heads=2, bias=False)
    with torch.no_grad():
        ref1.lin.weight.copy_(v1.lin.weight)
        ref1.att_src.copy_(v1.att_src)
        ref1.att_dst.copy_(v1.att_dst)
    assert v1.bias is None
    torch.testing.assert_close(v1(x, edges), ref1(x, edges), atol=1e-5, rtol=0)
    v2 = gat.GATv2Layer(F_IN, 4, heads=2, bias=False, concat=False)
    ref2 = GATv2Conv(F_IN, 4, heads=2, bias=False, concat=False)
    with torch.no_grad():
        ref2.lin_l.weight.copy_(v2.lin_l.weight)
        ref2.lin_r.weight.copy_(v2.lin_r.weight)
        ref2.att.copy_(v2.att)
    assert v2.bias is None and v2.lin_l.bias is None and v2.lin_r.bias is None
    torch.testing.assert_close(v2(x, edges), ref2(x, edges), atol=1e-5, rtol=0)


def test_gatv2_attention_weights_match_pyg(graph):
    x, edges = graph
    layer = gat.GATv2Layer(F_IN, 4, heads=3, negative_slope=0.3)
    ref = GATv2Conv(F_IN, 4, heads=3, negative_slope=0.3)
    copy_gatv2(layer, ref)
    out, (used, alpha) = layer(x, edges, return_attention=True)
    ref_out, (ref_edges, ref_alpha) = ref(x, edges, return_attention_weights=True)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    key, ref_key = used[0] * N + used[1], ref_edges[0] * N + ref_edges[1]
    torch.testing.assert_close(
        alpha[key.argsort()], ref_alpha[ref_key.argsort()], atol=1e-5, rtol=0
    )
    dense, alpha_dense = layer.forward_dense(x, gat.to_dense_adjacency(edges, N), True)
    torch.testing.assert_close(dense, ref_out, atol=1e-5, rtol=0)
    torch.testing.assert_close(alpha, alpha_dense[:, used[1], used[0]].T, atol=1e-6, rtol=0)


def test_initialisation_is_glorot():
    """PyG's GATConv / GATv2Conv initialise W and a with Glorot (Xavier) uniform:
    U(-b, b) with b = sqrt(6 / (fan_in + fan_out))."""
    torch.manual_seed(0)
    v1, v2 = gat.GATLayer(40, 30, heads=4), gat.GATv2Layer(40, 30, heads=4)
    for w in (v1.lin.weight, v2.lin_l.weight, v2.lin_r.weight):  # [120, 40]
        bound = (6 / (40 + 120)) ** 0.5
        assert w.abs().max() <= bound and w.abs().max() > 0.95 * bound
        assert abs(w.std().item() - bound / 3**0.5) < 0.05 * bound
    for a in (v1.att_src, v1.att_dst, v2.att):  # [1, 4, 30]: fans 4 * 30 and 1 * 30
        bound = (6 / (4 * 30 + 30)) ** 0.5
        assert a.abs().max() <= bound and a.abs().max() > 0.9 * bound
    for layer in (v1, v2, gat.GCNLayer(40, 30)):
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias))


def test_edge_helpers_follow_the_inputs_device_not_the_default():
    """to_dense_adjacency, add_self_loops and coalesce make their tensors on edge_index's
    device: with torch's default device set elsewhere, the results are unchanged."""
    edges = torch.tensor([[2, 0, 2, 1, 1], [0, 1, 0, 1, 3]])

    def compute():
        return (
            gat.to_dense_adjacency(edges, 4),
            gat.add_self_loops(edges, 4),
            gat.coalesce(edges, 4),
        )

    expected = compute()
    with default_device("meta"):
        got = compute()
    for a, b in zip(got, expected, strict=True):
        assert a.device == b.device and torch.equal(a, b), "to_dense_adjacency: device"


def test_edge_lists():
    edges = torch.tensor([[2, 0, 2, 1, 1], [0, 1, 0, 1, 3]])
    assert gat.coalesce(edges, 4).tolist() == [[0, 1, 1, 2], [1, 1, 3, 0]]
    adj = gat.to_dense_adjacency(edges, 4)
    assert adj.dtype == torch.bool and adj.nonzero().tolist() == [[0, 2], [1, 0], [1, 1], [3, 1]]
    looped = gat.add_self_loops(edges, 4)
    assert looped.tolist() == [[2, 0, 2, 1, 0, 1, 2, 3], [0, 1, 0, 3, 0, 1, 2, 3]]
    empty = torch.zeros(2, 0, dtype=torch.long)
    assert gat.add_self_loops(empty, 2).tolist() == [[0, 1], [0, 1]]
    assert gat.coalesce(empty, 2).shape == (2, 0)
    layer = gat.GATLayer(3, 2)
    x = torch.randn(2, 3)
    torch.testing.assert_close(layer(x, empty), layer.lin(x) + layer.bias)  # itself only
    with pytest.raises(ValueError, match="edge_index must be int64, got torch.int32"):
        gat.coalesce(edges.int(), 4)
    with pytest.raises(ValueError, match=r"node ids outside 0..3"):
        gat.to_dense_adjacency(edges - 1, 4)
    with pytest.raises(ValueError, match=r"node ids outside 0..2"):
        gat.add_self_loops(edges, 3)
    with pytest.raises(ValueError, match=r"edge_index must be \[2, E\], got \[3, 2\]"):
        gat.coalesce(torch.zeros(3, 2, dtype=torch.long), 4)
    with pytest.raises(ValueError, match=r"edge_index must be \[2, E\], got \[2\]"):
        gat.coalesce(torch.zeros(2, dtype=torch.long), 4)
    with pytest.raises(ValueError, match=r"edge_index must be \[2, E\], got <class 'list'>"):
        gat.coalesce([[0], [1]], 4)
    for args in ((0, 2, 1), (3, 0, 1), (3, 2, 0)):
        with pytest.raises(ValueError, match="must be >= 1, got " + ", ".join(map(str, args))):
            gat.GATLayer(*args)
    assert gat.GATv2Layer(1, 1, 1)(torch.ones(2, 1), empty).shape == (2, 1)


@pytest.mark.parametrize("layer_cls", [gat.GATLayer, gat.GATv2Layer])
def test_num_targets_computes_the_first_nodes_only(layer_cls):
    """With num_targets=T a layer returns the outputs of nodes 0..T-1, as without it, when
    every edge ends among them (self-loops for those only); other edges are refused."""
    torch.manual_seed(0)
    edges = torch.tensor([[2, 3, 4, 0, 1], [0, 0, 1, 1, 0]])  # every edge ends at node 0 or 1
    layer, x = layer_cls(3, 4, heads=2), torch.randn(5, 3)
    out, (used, _) = layer(x, edges, return_attention=True, num_targets=2)
    assert out.shape == (2, 8) and int(used[1].max()) == 1
    assert sorted(used[:, used[0] == used[1]].T.tolist()) == [[0, 0], [1, 1]]
    torch.testing.assert_close(out, layer(x, edges)[:2])
    with pytest.raises(ValueError, match="every edge must end at a node in 0..0"):
        layer(x, edges, num_targets=1)
    with pytest.raises(ValueError, match="num_targets=6"):
        layer(x, edges, num_targets=6)
    assert gat.add_self_loops(edges, 5, num_targets=2)[:, -2:].tolist() == [[0, 1], [0, 1]]
    model = gat.GAT(3, 2, hidden=4, heads=2, dropout=0.0, layer=layer_cls)
    with pytest.raises(ValueError, match="num_targets needs the sparse form"):
        model(x, gat.to_dense_adjacency(edges, 5), dense=True, num_targets=(2, 1))


def test_layers_describe_themselves():
    assert gat.GATLayer(5, 4, heads=3, dropout=0.5).extra_repr() == (
        "5, 4, heads=3, concat=True, dropout=0.5, add_self_loops=True"
    )
    assert gat.GATv2Layer(5, 4, concat=False, add_self_loops=False).extra_repr() == (
        "5, 4, heads=1, concat=False, dropout=0.0, add_self_loops=False"
    )


def test_segment_softmax_on_several_dimensions_and_float64():
    torch.manual_seed(0)
    scores = torch.randn(6, 2, 3, dtype=torch.float64)
    index = torch.tensor([2, 0, 2, 2, 0, 3])
    alpha = gat.segment_softmax(scores, index, 5)
    assert alpha.dtype == torch.float64
    for node in (0, 2, 3):
        rows = index == node
        torch.testing.assert_close(alpha[rows], scores[rows].softmax(0))
    # the maximum is a constant: the gradient is the softmax's
    scores.requires_grad_(True)
    weights = torch.randn(6, 2, 3, dtype=torch.float64)
    (grad,) = torch.autograd.grad((gat.segment_softmax(scores, index, 5) * weights).sum(), scores)
    rows = index == 2
    (ref,) = torch.autograd.grad((scores[rows].softmax(0) * weights[rows]).sum(), scores)
    torch.testing.assert_close(grad[rows], ref[rows])


def test_segment_softmax_keeps_the_device():
    """On the meta device (no data): what is made inside follows the scores' device."""
    index = torch.tensor([1, 2], device="meta")
    assert gat.segment_softmax(torch.zeros(2, 1, device="meta"), index, 3).device.type == "meta"


def test_dense_self_loops_on_the_adjacency_device():
    """The identity added to a dense adjacency is made on its device (meta: no data)."""
    adj = torch.zeros(3, 3, dtype=torch.bool, device="meta")
    for cls in (gat.GATLayer, gat.GATv2Layer):
        assert cls(2, 2)._adjacency_used(adj, 3).device.type == "meta"
    looped = gat.GATLayer(2, 2)._adjacency_used(torch.zeros(3, 3, dtype=torch.bool), 3)
    assert torch.equal(looped, torch.eye(3, dtype=torch.bool))
    kept = gat.GATLayer(2, 2, add_self_loops=False)._adjacency_used(torch.zeros(3, 3).bool(), 3)
    assert not kept.any()


def test_error_messages_name_the_layer(graph):
    x, edges = graph
    with pytest.raises(ValueError, match=r"^GCNLayer: x must be \[N, F_in=5\]"):
        gat.GCNLayer(F_IN, 3)(x[:, :3], edges)
    with pytest.raises(ValueError, match=r"^GATv2Layer: x must be \[N, F_in=5\]"):
        gat.GATv2Layer(F_IN, 3)(x[:, :3], edges)
    with pytest.raises(ValueError, match=r"^GATv2Layer: edge_index must be \[2, E\]"):
        gat.GATv2Layer(F_IN, 3)(x, edges.T)
    with pytest.raises(ValueError, match=r"^GATLayer: edge_index must be \[2, E\]"):
        gat.GATLayer(F_IN, 3)(x, edges.T)
    with pytest.raises(ValueError, match=r"^GATv2Layer: adj must be a bool"):
        gat.GATv2Layer(F_IN, 3).forward_dense(x, torch.ones(N, N))
    with pytest.raises(ValueError, match=r"^add_self_loops: edge_index"):
        gat.add_self_loops(edges.T, N)
    with pytest.raises(ValueError, match=r"^to_dense_adjacency: edge_index"):
        gat.to_dense_adjacency(edges.T, N)
    with pytest.raises(ValueError, match=r"^coalesce: edge_index"):
        gat.coalesce(edges.T, N)
    with pytest.raises(ValueError, match=r"^GATLayer: x must be"):
        gat.GATLayer(F_IN, 3).forward_dense(x[:, :2], gat.to_dense_adjacency(edges, N))


def test_dense_form_takes_sparse_features(graph):
    x, edges = graph
    model = gat.GAT(F_IN, 3, hidden=2, heads=2).eval()
    adj = gat.to_dense_adjacency(edges, N)
    ref = model(x, edges)
    for form in (x.to_sparse(), x.to_sparse_csr(), sparse.SparseFeatures(x)):
        torch.testing.assert_close(model(form, adj, dense=True), ref, atol=1e-5, rtol=0)


def test_where_the_models_drop(graph, monkeypatch):
    """Dropout on the inputs and on the hidden features (and, in GAT, on both layers'
    attention weights), in training mode only: the documented order of each model."""
    x, edges = graph
    calls = []
    real = sparse.dropout

    def recording(t, p, training=True):
        calls.append((tuple(t.shape), p, training))
        return real(t, p, training)

    monkeypatch.setattr(gat.sparse, "dropout", recording)
    e = edges.shape[1] - 1 + N  # the self-loop 3 -> 3 replaced, one loop per node added
    for model, expected in (
        (gat.MLP(F_IN, 6, 3, dropout=0.3), [((N, F_IN), 0.3), ((N, 6), 0.3)]),
        (gat.GCN(F_IN, 6, 3, dropout=0.3), [((N, F_IN), 0.3), ((N, 6), 0.3)]),
        (
            gat.GAT(F_IN, 3, hidden=2, heads=4, dropout=0.3),
            [((N, F_IN), 0.3), ((e, 4), 0.3), ((N, 8), 0.3), ((e, 1), 0.3)],
        ),
    ):
        for training in (True, False):
            calls.clear()
            model.train(training)
            model(x, edges)
            assert calls == [(*c, training) for c in expected], type(model).__name__
    calls.clear()
    model.train()(x, gat.to_dense_adjacency(edges, N), dense=True)
    assert calls == [
        ((N, F_IN), 0.3, True),
        ((4, N, N), 0.3, True),
        ((N, 8), 0.3, True),
        ((1, N, N), 0.3, True),
    ]


@pytest.mark.parametrize(
    "ours, theirs",
    [(gat.GATLayer, GATConv), (gat.GATv2Layer, GATv2Conv)],
)
def test_layer_defaults_are_pygs(ours, theirs):
    """Left at their defaults, our layers are PyG's: one head, concatenated, LeakyReLU
    slope 0.2, no dropout, self-loops added, a bias."""
    mine, ref = ours(5, 4), theirs(5, 4)
    for name in ("heads", "concat", "negative_slope", "dropout", "add_self_loops"):
        assert getattr(mine, name) == getattr(ref, name), name
    assert mine.bias.shape == ref.bias.shape
    assert (gat.GCNLayer(5, 4).bias is None) == (GCNConv(5, 4).bias is None)


def test_edge_functions_keep_the_device():
    """On the meta device (no data) with no edge (so no node id is read): what is made
    inside follows the edge list's device."""
    import torch.fx.experimental._config as fx_config

    empty = torch.zeros(2, 0, dtype=torch.long, device="meta")
    x = torch.zeros(3, 2, device="meta")
    with fx_config.patch(meta_nonzero_assume_all_nonzero=True):  # boolean indexing on meta
        assert gat.to_dense_adjacency(empty, 3).device.type == "meta"
        assert gat.add_self_loops(empty, 3).device.type == "meta"
        assert gat.GCNLayer(2, 2).to("meta")(x, empty).device.type == "meta"


def test_parameters_are_named_and_shaped_as_pygs():
    """The module docstring's promise: a layer's weights copy into PyG's layer unchanged
    (same names, same shapes, nothing extra such as an unused bias of ``lin``)."""
    for ours, theirs in (
        (gat.GCNLayer(5, 4), GCNConv(5, 4)),
        (gat.GATLayer(5, 4, heads=2), GATConv(5, 4, heads=2)),
        (gat.GATv2Layer(5, 4, heads=2), GATv2Conv(5, 4, heads=2)),
    ):
        shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
        assert shapes == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}


def test_gat_on_a_receptive_field_returns_the_targets_logits_only(graph):
    """GAT(..., num_targets=(T_1, T_2)) on a receptive field's per-layer edges: logits
    [T_2, K], those of the whole graph at the asked-for nodes."""
    from course_lib import gat_training

    x, edges = graph
    model = gat.GAT(F_IN, 3, hidden=4, heads=2, dropout=0.0).eval()
    mask = torch.zeros(N, dtype=torch.bool)
    mask[[1, 4]] = True
    field = gat_training.receptive_field(edges, mask)
    with torch.no_grad():
        full = model(x, edges)
        rows = []  # the first layer, too, computes only the nodes the second one reads
        model.conv1.register_forward_hook(lambda module, args, out: rows.append(out.shape[0]))
        part = model(x[field.nodes], field.edges, num_targets=field.num_targets)
    assert rows == [field.num_targets[0]] < [len(field.nodes)], "GAT.forward: conv1's rows"
    assert part.shape == (2, 3), "GAT.forward: the logits of the targets only"
    torch.testing.assert_close(part, full[field.nodes[:2]], atol=1e-6, rtol=1e-5)


def test_num_targets_is_checked_by_every_edge_helper():
    """num_targets = n: every edge must end at one of the first n nodes (n = 0 with no
    edge is allowed); add_self_loops and the layers refuse an edge that ends beyond."""
    edges = torch.tensor([[0, 2], [1, 3]])
    empty = torch.zeros(2, 0, dtype=torch.long)
    assert gat.add_self_loops(empty, 3, num_targets=0).shape == (2, 0)
    with pytest.raises(ValueError, match=r"^add_self_loops: num_targets=2 must be at most 4"):
        gat.add_self_loops(edges, 4, num_targets=2)
    layer = gat.GATLayer(2, 2)
    with pytest.raises(ValueError, match=r"^GATLayer: num_targets=2 must be at most 4"):
        layer(torch.randn(4, 2), edges, num_targets=2)
