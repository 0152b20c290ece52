"""offline: sentence encoders assembled from split zip archives (glmrag.index.offline_models)."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import pytest

from glmrag.index import offline_models
from glmrag.index.embed import resolve_model_path
from glmrag.index.offline_models import SplitModel, assemble, find_pieces, offline_model_path

FILES = {
    "model/modules.json": b'[{"idx": 0}]',
    "model/config.json": b'{"d": 768}',
    "model/weights.bin": os.urandom(5000),
}


def split_archive(tmp_path: Path, pieces: int = 3) -> list[Path]:
    """A zip of FILES (stored, so the bytes are random and the pieces cut through members), cut into pieces."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in FILES.items():
            zf.writestr(name, data)
    data = buf.getvalue()
    cut = len(data) // pieces + 1
    paths = []
    for i in range(pieces):
        path = tmp_path / f"part_{i + 1:03d}" / "input" / f"tiny.zip.{i + 1:03d}"
        path.parent.mkdir(parents=True)
        path.write_bytes(data[i * cut : (i + 1) * cut])
        paths.append(path)
    return paths


def test_pieces_join_into_the_model_folder(tmp_path):
    pieces = split_archive(tmp_path)
    folder = assemble(pieces, tmp_path / "cache" / "tiny")
    assert folder == tmp_path / "cache" / "tiny"
    # the model root is the archive's model/ folder, unwrapped
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == {Path(k).name: v for k, v in FILES.items()}
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["tiny"]  # no temporary folder left behind
    # once assembled, the pieces are not read again
    for p in pieces:
        p.unlink()
    assert assemble(pieces, folder) == folder


@pytest.mark.parametrize("broken", ["reordered", "missing", "corrupt"])
def test_bad_pieces_raise_and_leave_no_folder(tmp_path, broken):
    pieces = split_archive(tmp_path)
    if broken == "reordered":
        pieces = [pieces[1], pieces[0], pieces[2]]
    elif broken == "missing":
        pieces = pieces[:2]
    else:
        data = bytearray(pieces[1].read_bytes())
        data[100] ^= 0xFF  # inside the random member bytes: the zip still opens, the CRC fails
        pieces[1].write_bytes(bytes(data))
    with pytest.raises(ValueError, match="tiny.zip"):
        assemble(pieces, tmp_path / "cache" / "tiny")
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


def test_archive_without_the_required_file_is_rejected(tmp_path):
    pieces = split_archive(tmp_path, pieces=2)
    with pytest.raises(ValueError, match="holds no tokenizer.json"):
        assemble(pieces, tmp_path / "cache" / "tiny", required_file="tokenizer.json")
    assert list((tmp_path / "cache").iterdir()) == []


def test_offline_name_resolves_through_installed_distributions(tmp_path, monkeypatch):
    """find_pieces reads the pieces from the distributions' installed files, in the model's order."""
    pieces = split_archive(tmp_path)

    class Dist:
        def __init__(self, path: Path) -> None:
            self.path = path
            self.files = ["pkg/__init__.py", f"pkg/input/{path.name}"]

        def locate_file(self, f):
            return self.path if f.endswith(self.path.name) else tmp_path / f

    dists = {f"tiny-part-{i + 1}": Dist(p) for i, p in enumerate(pieces)}
    monkeypatch.setattr(offline_models.importlib.metadata, "distribution", lambda name: dists[name])
    model = SplitModel(distributions=tuple(dists), piece_name="tiny.zip", extra="tiny")
    assert find_pieces(model) == pieces
    monkeypatch.setitem(offline_models.SPLIT_MODELS, "tiny", model)
    folder = offline_model_path("offline:tiny", cache_dir=tmp_path / "models")
    assert json.loads((Path(folder) / "config.json").read_text()) == {"d": 768}
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path / "root"))
    assert resolve_model_path("offline:tiny") == str(tmp_path / "root" / "models" / "tiny")  # embed.py routes here
    with pytest.raises(ValueError, match="offline:all-mpnet-base-v2"):
        offline_model_path("offline:nope")


def test_missing_packages_name_the_extra():
    model = SplitModel(distributions=("glmrag-no-such-dist-001",), piece_name="x.zip", extra="mpnet")
    with pytest.raises(RuntimeError, match=r"pip install -e '\.\[mpnet\]'.*glmrag-no-such-dist-001"):
        find_pieces(model)


@pytest.mark.slow  # joins and unpacks 404 MB, then loads the model (about 2 minutes on a busy 2-core machine)
def test_real_all_mpnet_base_v2_assembles_and_embeds(tmp_path):
    model = offline_models.SPLIT_MODELS["all-mpnet-base-v2"]
    try:
        find_pieces(model)
    except RuntimeError:
        pytest.skip("the mpnet extra is not installed: pip install -e '.[mpnet]'")
    from glmrag.index.embed import Embedder

    folder = offline_model_path("offline:all-mpnet-base-v2", cache_dir=tmp_path)
    emb = Embedder(folder).encode(["Who directed Jaws?", "Steven Spielberg directed Jaws.", "The Nile is a river."])
    assert emb.shape == (3, 768)  # GLM-RAG Table 14's embedding size
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.3
