"""Chapter 14: sparse node features (CSR with a stored transpose), their linear map,
gradient and dropout.

Covers course_lib.sparse; the graph models' use of sparse features is tested in
test_gat.py.
"""

import pickle
import subprocess
import sys

import pytest
import torch

from course_lib import sparse


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
        "sparse.dropout(x.to_sparse(), 0.5)\n"
        "# and no filter left behind, at import or after, nor a changed global setting\n"
        "assert not any(f[1] and 'CSR' in f[1].pattern for f in warnings.filters)\n"
        "assert not torch.sparse.check_sparse_tensor_invariants.is_enabled()\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, first], input=data, capture_output=True, timeout=120
    )
    assert run.returncode == 0, run.stderr.decode()
    assert b"Sparse CSR tensor support is in beta" not in run.stderr
    # PyTorch >= 2.11 warns once per process unless invariant checks are set explicitly
    assert b"Sparse invariant checks are implicitly disabled" not in run.stderr


def test_sparse_features_rows():
    x = sparse_matrix()
    index = torch.tensor([5, 0, 17, 5])
    sub = sparse.SparseFeatures(x).rows(index)
    assert isinstance(sub, sparse.SparseFeatures) and torch.equal(sub.to_dense(), x[index])
    w = torch.randn(3, x.shape[1])
    assert torch.allclose(sparse.linear(sub, w), x[index] @ w.T, atol=1e-6)


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
