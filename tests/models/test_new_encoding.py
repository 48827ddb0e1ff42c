"""A new node encoding is one spec class plus its registration (docs/DESIGN.md, "Adding an
encoding"): a toy one-column encoding defined here, and registered for this test only, is computed
and stored by ``dsgraph encode``, read back by a rank's loader, accepted by the model options'
validation, fed in by the model's encoder and suggested by the missing-array error, without a
change to any other module."""

import dataclasses

import numpy as np
import pytest
import torch

from dsgraph.graph import save_npz
from dsgraph.graph.encode.cli import build_parser
from dsgraph.graph.encode.cli import main as encode
from dsgraph.graph.encodings import EncodingSpec, arrays_of, missing_error, register, registry, stored_arrays
from dsgraph.graph.rank_reader import DatasetFile
from dsgraph.models import TRANSFORMER, GraphTransformer, ModelOptions
from tests.graphs import random_graph


class LogInDegree(EncodingSpec):
    """log(1 + in-degree) of every node, float32 [N, 1], stored by `dsgraph encode --toy 1`."""

    name = "toy"
    arrays = ("toy",)
    help = "log(1 + in-degree), one column"
    default_width = 1

    def compute(self, adjacency, width, args, bar, log):
        return {"toy": np.log1p(np.diff(adjacency.in_ptr)).astype(np.float32)[:, None].repeat(width, 1)}


@pytest.fixture()
def toy(monkeypatch):
    """The toy spec registered until the test ends."""
    monkeypatch.setattr(registry, "_ENCODINGS", dict(registry._ENCODINGS))
    return register(LogInDegree())


def test_an_unregistered_encoding_is_refused_by_the_model_options():
    with pytest.raises(ValueError, match="'model.encodings' must list distinct names among rwse, lappe, degree; got"):
        ModelOptions(encodings=("toy",))


def test_dsgraph_encode_stores_it_and_a_rank_reads_it(toy, tmp_path):
    assert "--toy" in build_parser().format_help() and "toy" in stored_arrays()
    path = str(tmp_path / "g.npz")
    graph = random_graph()
    save_npz(graph, path)
    assert encode([path, "--toy", "1", "--quiet"]) == 0
    ids = np.arange(5, 15)
    rows = DatasetFile(path).node_data(ids, ids, arrays_of(["toy", "degree"])).enc
    assert rows["toy"].dtype == torch.float32 and rows["toy"].shape == (10, 1)
    assert torch.equal(rows["toy"][:, 0], torch.log1p(graph.in_degrees()[ids].float()))
    assert "`dsgraph encode rmat:9 --toy 1`" in str(missing_error("rmat:9", "file", ["toy"]))


@pytest.mark.parametrize("combine", ["concat", "add"])
def test_the_model_reads_it_beside_the_others(toy, combine):
    options = dataclasses.replace(TRANSFORMER, encodings=("degree", "toy"), encoding_input=combine, max_degree=4)
    enc = {"toy": torch.rand(6, 1), "degree": torch.randint(0, 9, (6, 2))}
    model = GraphTransformer(
        in_dim=3, hidden=8, num_classes=2, heads=2, layers=2, options=options, encoding_widths={"toy": 1, "degree": 2}
    )
    block = model.encoder.eval()(enc, seed=0, step=0, dtype=torch.float32)
    if combine == "concat":  # float columns first, then the degree embedding
        assert (
            model.encoder.concat_width == 1 + options.degree_dim
            and model.input.in_features == 3 + 1 + options.degree_dim
        )
        assert torch.equal(block[:, :1], enc["toy"])
    else:
        assert model.encoder.project.in_features == 1 and block.shape == (6, 8)
    with pytest.raises(ValueError, match="the data has no toy"):
        GraphTransformer(
            in_dim=3, hidden=8, num_classes=2, heads=2, layers=2, options=options, encoding_widths={"degree": 2}
        )
