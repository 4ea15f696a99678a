"""Data sets of the course: one download, one checksum, one loader each.

Where the data comes from
-------------------------
Every file the course reads is listed in ``FILES`` with its canonical public
URL and its sha256.  :func:`fetch` returns a local path to one of them:

* with the environment variable ``COURSE_DATA_DIR`` set, the file is read from
  ``$COURSE_DATA_DIR/<relative path>`` (for example
  ``$COURSE_DATA_DIR/tinyshakespeare/input.txt``) and the network is never
  touched.  The test suite and offline book builds use this;
* otherwise the file is downloaded once into ``$COURSE_CACHE_DIR`` (default
  ``~/.cache/course_lib``) and reused while its checksum matches.

Either way the sha256 is checked, and every problem (missing file, corrupted
file, no network, missing optional package) raises :class:`DataError` with one
message that says what is wrong and how to fix it.

The loaders
-----------
========================  =====================================  ===============================
loader                    returns                                used for
========================  =====================================  ===============================
:func:`tiny_shakespeare`  ``str``, 1,115,394 characters          character-level language models
:func:`cora`              :class:`Graph`, 2708 nodes             graph attention (GAT)
:func:`karate_club`       :class:`Graph`, 34 nodes               graph attention, by hand
:func:`digits`            images ``[1797, 1, 8, 8]``, labels     vision attention (patches)
:func:`co2`               weekly ``pandas.Series``, 2284 points  time-series forecasting
========================  =====================================  ===============================

Only :func:`fetch`, :func:`tiny_shakespeare` and :func:`cora` need files; the
others come from packages (``networkx``, ``scikit-learn``, ``statsmodels``)
installed by the ``data`` extra (``pip install -r requirements.txt`` in the
repository installs them).  Those packages are imported inside the loaders, so ``import course_lib.data`` is
cheap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import importlib
import os
import pickle
import tempfile
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:  # pandas is only needed by co2()
    import pandas as pd

__all__ = [
    "DataError",
    "FILES",
    "Graph",
    "fetch",
    "tiny_shakespeare",
    "cora",
    "karate_club",
    "digits",
    "co2",
]


class DataError(RuntimeError):
    """A data set could not be loaded; the message says why and how to fix it."""


# ---------------------------------------------------------------------------
# Files: canonical URL and sha256 of everything the loaders read
# ---------------------------------------------------------------------------

_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
_PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data/"

#: ``relative path -> (canonical URL, sha256)`` of every file :func:`fetch` knows.
FILES: dict[str, tuple[str, str]] = {
    "tinyshakespeare/input.txt": (
        _SHAKESPEARE_URL,
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    ),
    **{
        f"planetoid/ind.cora.{suffix}": (_PLANETOID_URL + f"ind.cora.{suffix}", sha256)
        for suffix, sha256 in {
            "x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
            "tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
            "allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
            "y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
            "ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
            "ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
            "graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
            "test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
        }.items()
    },
}

_DOWNLOAD_TIMEOUT_S = 60
_OFFLINE_HINT = (
    "To work offline, set COURSE_DATA_DIR to a folder that holds the course's data files "
    "(e.g. tinyshakespeare/input.txt, planetoid/ind.cora.x)."
)


# ---------------------------------------------------------------------------
# fetch(): local folder, or download into the cache, always checksummed
# ---------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _cache_dir() -> Path:
    """``$COURSE_CACHE_DIR``, else ``~/.cache/course_lib``."""
    return Path(os.environ.get("COURSE_CACHE_DIR") or "~/.cache/course_lib").expanduser()


def _download(relative_path: str, url: str, expected: str, target: Path) -> None:
    """Download ``url`` to a temporary file next to ``target``, check it, move it in place."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name}.", suffix=".part"
        )
    except OSError as exc:
        raise DataError(
            f"Cannot write to the cache folder {target.parent} ({exc}). Set COURSE_CACHE_DIR to "
            f"a writable folder. {_OFFLINE_HINT}"
        ) from None
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        try:
            with (
                os.fdopen(fd, "wb") as out,
                urllib.request.urlopen(url, timeout=_DOWNLOAD_TIMEOUT_S) as response,
            ):
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise DataError(
                f"Could not download {relative_path} from {url}: {reason}. Check the internet "
                f"connection and try again. {_OFFLINE_HINT}"
            ) from None
        actual = digest.hexdigest()
        if actual != expected:
            raise DataError(
                f"The download of {relative_path} from {url} has the wrong checksum: expected "
                f"sha256 {expected}, got {actual}. The download was corrupted or the file "
                f"changed upstream; nothing was saved, so try again to re-download. {_OFFLINE_HINT}"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)  # a no-op once the file was moved into place


def fetch(relative_path: str) -> Path:
    """Local path of one of the course's data files, checked against its sha256.

    ``relative_path`` is a key of :data:`FILES`, e.g. ``"tinyshakespeare/input.txt"``
    or ``"planetoid/ind.cora.graph"``.

    * ``COURSE_DATA_DIR`` set (and not empty): return
      ``$COURSE_DATA_DIR/<relative_path>``; never touches the network.
    * otherwise: return ``$COURSE_CACHE_DIR/<relative_path>`` (default cache
      ``~/.cache/course_lib``), downloading it first from its canonical URL
      when it is missing or its checksum does not match.

    Raises :class:`DataError` when the file is missing, corrupted, or cannot be
    downloaded; the message says how to fix it.
    """
    if relative_path not in FILES:
        raise DataError(
            f"Unknown data file {relative_path!r}; course_lib.data knows: "
            + ", ".join(sorted(FILES))
        )
    url, expected = FILES[relative_path]

    data_dir = os.environ.get("COURSE_DATA_DIR", "").strip()
    if data_dir:
        path = (Path(data_dir).expanduser() / relative_path).absolute()
        if not path.is_file():
            raise DataError(
                f"COURSE_DATA_DIR is set to {data_dir!r}, but the file {path} does not exist. "
                f"Point COURSE_DATA_DIR at a folder containing {relative_path} (the course's data "
                "folder holds e.g. tinyshakespeare/input.txt and planetoid/ind.cora.x), or unset "
                "COURSE_DATA_DIR to download the files from their public sources."
            )
        actual = _sha256(path)
        if actual != expected:
            raise DataError(
                f"{path} (from COURSE_DATA_DIR) has the wrong checksum: expected sha256 "
                f"{expected}, got {actual}. The file is corrupted or a different version: "
                f"delete it and put a fresh copy from {url} in its place, or unset "
                "COURSE_DATA_DIR to re-download it into the cache."
            )
        return path

    target = _cache_dir() / relative_path
    if target.is_file() and _sha256(target) == expected:
        return target
    _download(relative_path, url, expected, target)  # also replaces a corrupted cached copy
    return target


def _require(module: str) -> ModuleType:
    """Import an optional dependency, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DataError(
            f"This loader needs the package {module.split('.')[0]!r}, which is not installed "
            f"({exc}). Install the course's requirements: pip install -r requirements.txt "
            "(from the repository's folder)"
        ) from None


# ---------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------


def tiny_shakespeare() -> str:
    """Karpathy's Tiny Shakespeare, the whole text as one string.

    1,115,394 characters (ASCII, so also bytes), 65 distinct characters.
    Used by the language-model chapters for character-level models.
    """
    return fetch("tinyshakespeare/input.txt").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------
# Graphs
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)
class Graph:
    """A node-classification graph, in the layout PyTorch Geometric uses.

    ``N`` nodes, ``F`` features, ``E`` directed edges:

    * ``x``: float32 ``[N, F]`` node features;
    * ``y``: int64 ``[N]`` class of each node, in ``0 .. num_classes - 1``;
    * ``edge_index``: int64 ``[2, E]``, row 0 the source, row 1 the target.
      Every undirected edge appears in both directions, with no duplicates and
      no self-loops, sorted by (source, target);
    * ``train_mask``, ``val_mask``, ``test_mask``: bool ``[N]``;
    * ``num_classes``: number of classes.
    """

    x: Tensor
    y: Tensor
    edge_index: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    num_classes: int

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]

    @property
    def num_edges(self) -> int:
        """Directed edges, i.e. twice the number of undirected ones."""
        return self.edge_index.shape[1]

    def to(self, device: torch.device | str) -> Graph:
        """The same graph with every tensor on ``device``."""
        return dataclasses.replace(
            self,
            **{
                field.name: getattr(self, field.name).to(device)
                for field in dataclasses.fields(self)
                if isinstance(getattr(self, field.name), Tensor)
            },
        )

    def __repr__(self) -> str:
        return (
            f"Graph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
            f"num_features={self.x.shape[1]}, num_classes={self.num_classes}, "
            f"train/val/test={int(self.train_mask.sum())}/{int(self.val_mask.sum())}/"
            f"{int(self.test_mask.sum())})"
        )


def _undirected_edge_index(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> Tensor:
    """``[2, E]`` edges in both directions, self-loops and duplicates removed, sorted."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    rows, cols = np.concatenate([src, dst]), np.concatenate([dst, src])
    keep = rows != cols
    keys = np.unique(rows[keep] * num_nodes + cols[keep])  # np.unique also sorts
    return torch.from_numpy(np.stack([keys // num_nodes, keys % num_nodes]))


def _mask(indices: np.ndarray | range, num_nodes: int) -> Tensor:
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[torch.as_tensor(np.asarray(indices), dtype=torch.long)] = True
    return mask


def _load_pickle(relative_path: str) -> Any:
    with open(fetch(relative_path), "rb") as f, warnings.catch_warnings():
        # The pickles name scipy.sparse.csr, which recent SciPy deprecates.
        warnings.simplefilter("ignore", DeprecationWarning)
        return pickle.load(f, encoding="latin1")


def cora() -> Graph:
    """The Cora citation graph with the Planetoid split (Yang et al., 2016).

    2708 papers, 1433 binary bag-of-words features, 7 classes; 10556 directed
    edges in ``edge_index`` (5278 citation links, each in both directions; the
    raw adjacency lists have 10858 entries, duplicates included, and no
    self-loops).  Split: 140 training nodes (nodes 0-139, 20 per class), 500
    validation nodes (140-639) and 1000 test nodes (listed in
    ``ind.cora.test.index``, all in 1708-2707).  Same processing as Kipf's
    ``gcn`` ``load_data`` and PyG's ``Planetoid("Cora")``; features are not
    normalized.  Used by the graph attention chapter (GAT).
    """
    sp = _require("scipy.sparse")
    allx, tx = _load_pickle("planetoid/ind.cora.allx"), _load_pickle("planetoid/ind.cora.tx")
    ally, ty = _load_pickle("planetoid/ind.cora.ally"), _load_pickle("planetoid/ind.cora.ty")
    y_train = _load_pickle("planetoid/ind.cora.y")
    graph = _load_pickle("planetoid/ind.cora.graph")
    test_index = np.loadtxt(fetch("planetoid/ind.cora.test.index"), dtype=np.int64)

    # Rows of tx/ty follow the order of ind.cora.test.index; put them at their nodes.
    x = sp.vstack([allx, tx]).toarray().astype(np.float32)
    labels = np.vstack([ally, ty]).argmax(axis=1)
    sorted_index = np.sort(test_index)
    x[test_index] = x[sorted_index]
    labels[test_index] = labels[sorted_index]
    num_nodes = x.shape[0]

    src = np.array([node for node, neighbours in graph.items() for _ in neighbours])
    dst = np.array([neighbour for neighbours in graph.values() for neighbour in neighbours])
    num_train = len(y_train)
    return Graph(
        x=torch.from_numpy(x),
        y=torch.from_numpy(labels.astype(np.int64)),
        edge_index=_undirected_edge_index(src, dst, num_nodes),
        train_mask=_mask(range(num_train), num_nodes),
        val_mask=_mask(range(num_train, num_train + 500), num_nodes),
        test_mask=_mask(test_index, num_nodes),
        num_classes=ally.shape[1],
    )


def karate_club() -> Graph:
    """Zachary's karate club (``networkx.karate_club_graph()``), small enough to follow by hand.

    34 members, 78 friendships (156 directed edges in ``edge_index``).
    Features are one-hot node ids (``x`` is the identity ``[34, 34]``); ``y`` is
    the club each member joined after the split: 0 for ``"Mr. Hi"`` (17
    members), 1 for ``"Officer"`` (17).  Semi-supervised split: one labelled
    node per club in ``train_mask`` (node 0, the instructor, and node 33, the
    administrator), the other 32 in ``test_mask``, ``val_mask`` all False.
    Used by the graph attention chapter.
    """
    nx = _require("networkx")
    g = nx.karate_club_graph()
    num_nodes = g.number_of_nodes()
    clubs = ["Mr. Hi", "Officer"]
    y = torch.tensor([clubs.index(g.nodes[n]["club"]) for n in range(num_nodes)])
    src, dst = zip(*g.edges(), strict=True)
    train = [0, num_nodes - 1]
    return Graph(
        x=torch.eye(num_nodes),
        y=y,
        edge_index=_undirected_edge_index(np.array(src), np.array(dst), num_nodes),
        train_mask=_mask(train, num_nodes),
        val_mask=torch.zeros(num_nodes, dtype=torch.bool),
        test_mask=~_mask(train, num_nodes),
        num_classes=len(clubs),
    )


# ---------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------


def digits() -> tuple[Tensor, Tensor]:
    """scikit-learn's 8x8 handwritten digits (the UCI optical digits test set).

    Returns ``(images, labels)``: float32 ``[1797, 1, 8, 8]`` scaled from the
    original 0-16 grey levels to [0, 1], and int64 ``[1797]`` in 0-9.  Small
    enough to train a vision Transformer on 2x2 or 4x4 patches on a CPU; used
    by the vision attention chapter.
    """
    datasets = _require("sklearn.datasets")
    bunch = datasets.load_digits()
    images = torch.from_numpy(bunch.images.astype(np.float32) / 16.0).unsqueeze(1)
    labels = torch.from_numpy(bunch.target.astype(np.int64))
    return images, labels


# ---------------------------------------------------------------------------
# Time series
# ---------------------------------------------------------------------------


def co2() -> pd.Series:
    """Weekly atmospheric CO2 at Mauna Loa (ppm), from ``statsmodels``' ``co2`` data set.

    A float64 ``pandas.Series`` named ``"co2"`` of 2284 weekly points indexed
    by date (weeks ending on Saturday), 1958-03-29 to 2001-12-29.  The 59
    missing weeks are filled by linear interpolation in time.  A trend plus a
    yearly cycle: the series Chapter 10 forecasts.
    """
    dataset = _require("statsmodels.datasets.co2")
    series = dataset.load_pandas().data["co2"].interpolate(method="time")
    return series.rename_axis("date")
