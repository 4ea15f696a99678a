"""Tests of course_lib.data: the facts of each data set, and every error path of fetch().

Loaders that read files use the course's data folder (``COURSE_DATA_DIR``, which
the root conftest points at ``<repo>/../shared/data``); they are skipped, with a
message, where that folder is absent.  No test touches the network: the download
path is exercised with ``urllib.request.urlopen`` replaced by a fake.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import subprocess
import sys
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import course_lib.data as data
from course_lib.data import DataError, Graph

REPO = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("COURSE_DATA_DIR") or REPO.parent / "shared" / "data").absolute()
NO_DATA_REASON = (
    f"the course data folder {DATA_DIR} does not exist; set COURSE_DATA_DIR to a folder "
    "holding tinyshakespeare/input.txt and planetoid/ind.cora.* to run these tests"
)
needs_data = pytest.mark.skipif(not DATA_DIR.is_dir(), reason=NO_DATA_REASON)
SHAKESPEARE = "tinyshakespeare/input.txt"


@pytest.fixture
def data_dir(monkeypatch: pytest.MonkeyPatch) -> Path:
    """COURSE_DATA_DIR pointed at the course's data folder, and the network forbidden."""
    monkeypatch.setenv("COURSE_DATA_DIR", str(DATA_DIR))
    _forbid_network(monkeypatch)
    return DATA_DIR


def _forbid_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args, **kwargs):
        raise AssertionError("course_lib.data touched the network")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)


def _assert_no_chained_traceback(error: BaseException) -> None:
    """The student sees only the DataError's message, not a deeper exception behind it."""
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_undirected(graph: Graph, num_undirected: int) -> None:
    """edge_index holds each undirected edge twice, sorted, no duplicates, no self-loops."""
    ei = graph.edge_index
    assert ei.dtype == torch.int64 and ei.shape == (2, 2 * num_undirected)
    assert graph.num_edges == 2 * num_undirected
    assert 0 <= int(ei.min()) and int(ei.max()) < graph.num_nodes
    pairs = [tuple(p) for p in ei.t().tolist()]
    assert len(set(pairs)) == len(pairs), "duplicate edges"
    assert all(u != v for u, v in pairs), "self-loops"
    assert set(pairs) == {(v, u) for u, v in pairs}, "not symmetric"
    assert pairs == sorted(pairs), "not sorted by (source, target)"


def _check_graph_types(graph: Graph, num_nodes: int, num_features: int) -> None:
    assert graph.num_nodes == num_nodes
    assert graph.x.dtype == torch.float32 and graph.x.shape == (num_nodes, num_features)
    assert graph.y.dtype == torch.int64 and graph.y.shape == (num_nodes,)
    assert set(graph.y.tolist()) == set(range(graph.num_classes))
    for mask in (graph.train_mask, graph.val_mask, graph.test_mask):
        assert mask.dtype == torch.bool and mask.shape == (num_nodes,)
    assert not (graph.train_mask & graph.val_mask).any()
    assert not (graph.train_mask & graph.test_mask).any()
    assert not (graph.val_mask & graph.test_mask).any()


# ---------------------------------------------------------------------------
# Import cost and the file table
# ---------------------------------------------------------------------------


def test_import_does_not_load_heavy_packages():
    heavy = ["scipy", "sklearn", "statsmodels", "networkx", "pandas"]
    code = f"import sys, course_lib.data; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]", out.stdout


@needs_data
def test_checksums_match_the_data_readme():
    readme = (DATA_DIR / "README.md").read_text()
    for name, (url, sha256) in data.FILES.items():
        assert f"| {name} |" in readme and sha256 in readme, name
        assert url.startswith("https://") and url.endswith(name.split("/")[-1])


@needs_data
def test_every_file_is_fetched_from_the_data_dir(data_dir):
    for name, (_, sha256) in data.FILES.items():
        path = data.fetch(name)
        assert path == data_dir / name
        assert _sha256(path) == sha256


# ---------------------------------------------------------------------------
# Tiny Shakespeare and Cora
# ---------------------------------------------------------------------------


@needs_data
def test_tiny_shakespeare(data_dir):
    text = data.tiny_shakespeare()
    assert isinstance(text, str)
    assert len(text) == 1_115_394
    assert len(set(text)) == 65
    assert text.startswith("First Citizen:")


@pytest.fixture(scope="module")
def cora() -> Graph:
    if not DATA_DIR.is_dir():
        pytest.skip(NO_DATA_REASON)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_DATA_DIR", str(DATA_DIR))
        _forbid_network(mp)
        return data.cora()


def _raw(name: str):
    with open(DATA_DIR / "planetoid" / f"ind.cora.{name}", "rb") as f, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # scipy.sparse.csr in the pickles
        return pickle.load(f, encoding="latin1")


def test_cora_sizes_and_types(cora):
    _check_graph_types(cora, num_nodes=2708, num_features=1433)
    assert cora.num_classes == 7
    assert set(cora.x.unique().tolist()) == {0.0, 1.0}, "bag of words is binary"
    assert (cora.x.sum(dim=1) > 0).all(), "every paper has some words"


def test_cora_edges(cora):
    _check_undirected(cora, num_undirected=5278)  # 10556 directed edges
    # Independently of the loader: the raw adjacency lists as a set of undirected links.
    links = {frozenset((u, v)) for u, vs in _raw("graph").items() for v in vs if u != v}
    assert len(links) == 5278
    assert {frozenset(p) for p in cora.edge_index.t().tolist()} == links


def test_cora_split(cora):
    train = cora.train_mask.nonzero().squeeze(1)
    val = cora.val_mask.nonzero().squeeze(1)
    test = cora.test_mask.nonzero().squeeze(1)
    assert train.tolist() == list(range(140))
    assert torch.bincount(cora.y[cora.train_mask], minlength=7).tolist() == [20] * 7
    assert val.tolist() == list(range(140, 640))
    assert len(test) == 1000 and int(test.min()) == 1708 and int(test.max()) == 2707
    test_index = np.loadtxt(DATA_DIR / "planetoid" / "ind.cora.test.index", dtype=np.int64)
    assert sorted(test_index.tolist()) == test.tolist()


def test_cora_test_rows_are_reordered_by_the_test_index(cora):
    # Row i of tx / ty describes node test_index[i] (the Planetoid convention).
    test_index = np.loadtxt(DATA_DIR / "planetoid" / "ind.cora.test.index", dtype=np.int64)
    tx, ty = _raw("tx").toarray(), _raw("ty")
    np.testing.assert_array_equal(cora.x[test_index].numpy(), tx)
    np.testing.assert_array_equal(cora.y[test_index].numpy(), ty.argmax(axis=1))
    allx, ally = _raw("allx").toarray(), _raw("ally")
    np.testing.assert_array_equal(cora.x[:1708].numpy(), allx)
    np.testing.assert_array_equal(cora.y[:1708].numpy(), ally.argmax(axis=1))


def test_graph_repr_and_to(cora):
    assert repr(cora) == (
        "Graph(num_nodes=2708, num_edges=10556, num_features=1433, num_classes=7, "
        "train/val/test=140/500/1000)"
    )
    moved = cora.to("cpu")
    assert moved.num_classes == 7 and torch.equal(moved.edge_index, cora.edge_index)


# ---------------------------------------------------------------------------
# fetch(): error paths and the download path
# ---------------------------------------------------------------------------


def test_missing_file_in_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    _forbid_network(monkeypatch)
    with pytest.raises(DataError) as info:
        data.fetch(SHAKESPEARE)
    message = str(info.value)
    assert str(tmp_path / "tinyshakespeare" / "input.txt") in message
    assert "COURSE_DATA_DIR" in message and "unset" in message
    _assert_no_chained_traceback(info.value)
    with pytest.raises(DataError, match="COURSE_DATA_DIR"):
        data.tiny_shakespeare()  # the loaders pass the message through


def test_corrupted_file_in_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    _forbid_network(monkeypatch)
    path = tmp_path / "tinyshakespeare" / "input.txt"
    path.parent.mkdir()
    path.write_bytes(b"To be, or not to be\n")
    with pytest.raises(DataError) as info:
        data.fetch(SHAKESPEARE)
    message = str(info.value)
    assert str(path) in message and "sha256" in message
    assert data.FILES[SHAKESPEARE][1] in message  # expected
    assert _sha256(path) in message  # actual
    assert "delete" in message


def test_unknown_file():
    with pytest.raises(DataError, match="Unknown data file"):
        data.fetch("imagenet/train.tar")


@pytest.fixture
def offline_cache(tmp_path, monkeypatch) -> Path:
    """COURSE_DATA_DIR unset and the cache in tmp_path: fetch() would download."""
    monkeypatch.delenv("COURSE_DATA_DIR", raising=False)
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_no_network(offline_cache, monkeypatch):
    def unreachable(url, *args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    with pytest.raises(DataError) as info:
        data.fetch(SHAKESPEARE)
    message = str(info.value)
    assert "COURSE_DATA_DIR" in message
    assert data.FILES[SHAKESPEARE][0] in message  # the URL
    assert "name resolution" in message  # the reason
    _assert_no_chained_traceback(info.value)
    assert [p for p in offline_cache.rglob("*") if p.is_file()] == [], "left a partial file"


class _FakeServer:
    """Stands in for urllib.request.urlopen, serving ``payload`` and counting requests."""

    def __init__(self, payload: bytes):
        self.payload = payload
        self.urls: list[str] = []

    def __call__(self, url, *args, **kwargs):
        self.urls.append(url)
        return io.BytesIO(self.payload)


@needs_data
def test_download_into_the_cache_then_reuse(offline_cache, monkeypatch):
    server = _FakeServer((DATA_DIR / SHAKESPEARE).read_bytes())
    monkeypatch.setattr(urllib.request, "urlopen", server)
    path = data.fetch(SHAKESPEARE)
    assert path == offline_cache / "tinyshakespeare" / "input.txt"
    assert _sha256(path) == data.FILES[SHAKESPEARE][1]
    assert server.urls == [data.FILES[SHAKESPEARE][0]]
    assert data.fetch(SHAKESPEARE) == path
    assert len(data.tiny_shakespeare()) == 1_115_394
    assert len(server.urls) == 1, "a cached file with the right checksum is downloaded again"
    assert sorted(p.name for p in path.parent.iterdir()) == ["input.txt"], "temp file left"


@needs_data
def test_corrupted_cache_is_downloaded_again(offline_cache, monkeypatch):
    server = _FakeServer((DATA_DIR / SHAKESPEARE).read_bytes())
    monkeypatch.setattr(urllib.request, "urlopen", server)
    stale = offline_cache / "tinyshakespeare" / "input.txt"
    stale.parent.mkdir(parents=True)
    stale.write_text("truncated")
    assert data.fetch(SHAKESPEARE) == stale
    assert len(server.urls) == 1
    assert _sha256(stale) == data.FILES[SHAKESPEARE][1]


def test_download_with_wrong_checksum_saves_nothing(offline_cache, monkeypatch):
    monkeypatch.setattr(urllib.request, "urlopen", _FakeServer(b"<html>rate limited</html>"))
    with pytest.raises(DataError) as info:
        data.fetch(SHAKESPEARE)
    message = str(info.value)
    assert "sha256" in message and data.FILES[SHAKESPEARE][1] in message
    assert hashlib.sha256(b"<html>rate limited</html>").hexdigest() in message
    assert "re-download" in message
    assert [p for p in offline_cache.rglob("*") if p.is_file()] == []


def test_missing_optional_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "networkx", None)  # makes `import networkx` fail
    with pytest.raises(DataError, match=r"'networkx'.*pip install -r requirements.txt"):
        data.karate_club()


# ---------------------------------------------------------------------------
# Karate club, digits, time series (shipped inside packages: no files needed)
# ---------------------------------------------------------------------------


def test_edge_index_helper_cleans_edges():
    # Neither data set has self-loops, so check their removal on a toy graph:
    # 0-1 twice (once reversed), a self-loop on 2, and 2-3.
    src, dst = np.array([0, 1, 2, 3]), np.array([1, 0, 2, 2])
    edge_index = data._undirected_edge_index(src, dst, num_nodes=4)
    assert edge_index.tolist() == [[0, 1, 2, 3], [1, 0, 3, 2]]


def test_karate_club():
    graph = data.karate_club()
    _check_graph_types(graph, num_nodes=34, num_features=34)
    _check_undirected(graph, num_undirected=78)  # 156 directed edges
    assert graph.num_classes == 2
    assert torch.equal(graph.x, torch.eye(34))
    assert graph.y[0] == 0 and graph.y[33] == 1
    assert torch.bincount(graph.y).tolist() == [17, 17]
    assert graph.train_mask.nonzero().squeeze(1).tolist() == [0, 33]
    assert not graph.val_mask.any()
    assert torch.equal(graph.test_mask, ~graph.train_mask)


def test_digits():
    images, labels = data.digits()
    assert images.dtype == torch.float32 and images.shape == (1797, 1, 8, 8)
    assert float(images.min()) == 0.0 and float(images.max()) == 1.0
    assert labels.dtype == torch.int64 and labels.shape == (1797,)
    assert sorted(labels.unique().tolist()) == list(range(10))


def test_co2():
    series = data.co2()
    assert len(series) == 2284
    assert str(series.index[0].date()) == "1958-03-29"
    assert str(series.index[-1].date()) == "2001-12-29"
    assert (series.index.to_series().diff().dropna() == np.timedelta64(7, "D")).all()
    assert series.dtype == np.float64 and series.notna().all()
    assert 300 < series.min() and series.max() < 400
    assert series.iloc[-1] > series.iloc[0] + 50  # the rise from ~316 to ~371 ppm
