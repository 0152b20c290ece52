"""A process that builds the GNN leaves no PyG-generated module in its TMPDIR (issue 22 item 10)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.chaos.conftest import ROOT

pytestmark = pytest.mark.chaos

BUILD = textwrap.dedent(
    """
    import tempfile, torch
    from glmrag.nn.gnn import GNNConfig, QueryGNN

    assert tempfile.gettempdir() == {tmpdir!r}
    config = dict(hidden_channels=4, num_layers=2, question_dim=4, relation_dim=4)
    for aggregation in ({{}}, {{"aggregation": "fused"}}, {{"aggregation": "materialized"}}):
        conv = QueryGNN(GNNConfig(**config, **aggregation)).convs[0]
        x = torch.randn(3, 2, 4)
        conv(x, x, torch.tensor([[0, 1], [1, 2]]), torch.tensor([0, 1]), torch.randn(2, 4)).sum().backward()
    print("built")
    """
)


@pytest.mark.integration  # builds the GNN in a fresh interpreter
def test_building_the_gnn_leaves_no_generated_module_in_tmpdir(tmp_path):
    """PyG 2.5+ writes ``glmrag.nn.gnn_conv_QueryRelationalConv_propagate_*.py`` when the layer is first built."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmpdir)}
    code = BUILD.format(tmpdir=str(tmpdir))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    left = sorted(p.name for p in tmpdir.glob("glmrag.nn.gnn_conv_*.py"))
    assert not left, f"the GNN left PyG's generated modules in TMPDIR: {left}"
    assert done.returncode == 0 and done.stdout.strip() == "built", done.stderr[-2000:]
