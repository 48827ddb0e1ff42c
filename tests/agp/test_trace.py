"""``trace_steps``: one torch.profiler trace per rank with the named communication and kernel regions."""

import glob
import os

import pytest

from dsgraph.train.config import DsgraphConfig, parse_trace_steps
from tests.distributed import run
from tests.train.helpers import ds_config, make_trainer, write_random_graph


def _traced(rank, world, tmp):
    trainer = make_trainer(
        tmp,
        ds_config(stage=1),
        strategy="ag",
        backend="reference",
        epochs=3,
        eval_every=3,
        trace_steps="1:2",
        trace_dir=f"{tmp}/traces",
    )
    trainer.fit(log=lambda line: None)


@pytest.mark.slow
def test_trace_has_named_regions_per_rank(tmp_path):
    write_random_graph(str(tmp_path))
    run(_traced, 2, tmp_path)
    files = sorted(glob.glob(os.path.join(tmp_path, "traces", "*.pt.trace.json*")))
    assert [os.path.basename(f).split(".")[0] for f in files] == ["rank0", "rank1"]
    text = open(files[0]).read()
    for region in ("dsgraph/step/1", "dsgraph/comm/all_gather", "dsgraph/attention/reference"):
        assert region in text, region
    assert "dsgraph/step/0" not in text and "dsgraph/step/2" not in text


@pytest.mark.parametrize("spec", ["3", "a:b", "5:5", "-1:2"])
def test_bad_trace_steps(spec):
    with pytest.raises(ValueError, match="trace_steps"):
        DsgraphConfig(trace_steps=spec)
    assert parse_trace_steps("2:4") == (2, 4)
