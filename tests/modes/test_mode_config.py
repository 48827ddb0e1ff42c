"""Each mode owns its config section, its checks of the rest of the run and whether a checkpoint
after an epoch resumes exactly; the config reads them from the mode registry."""

import pytest

from dsgraph.modes.registry import MODES
from dsgraph.parallel import get_strategy
from dsgraph.train.config import SECTIONS, DsgraphConfig


def test_the_config_takes_every_mode_section_from_the_registry():
    declared = {mode.section: mode.Config for mode in MODES.values() if mode.section is not None}
    assert declared == {"sampled": SECTIONS["sampled"], "isolated": SECTIONS["isolated"]}
    assert MODES["full"].section is None and MODES["full"].Config is None


@pytest.mark.parametrize(
    "section, message",
    [
        (
            {"mode": "sampled", "layers": 3, "sampled": {"fanouts": [5, 5]}},
            r"'fanouts' needs one entry per layer \(3\)",
        ),
        (
            {"mode": "isolated", "partitions": "store", "isolated": {"sync": "step"}},
            r"mode 'isolated' from a partition store \('partitions'\) trains one chunk pair at a time",
        ),
        ({"mode": "isolated", "eval_every": 3}, r"'eval_every' \(3\) must be a multiple of 'repart_every' \(5\)"),
    ],
)
def test_a_mode_checks_the_rest_of_the_run(section, message):
    with pytest.raises(ValueError, match="dsgraph config: .*" + message):
        DsgraphConfig.from_dict(section)
    cfg = DsgraphConfig()  # the mode's own check, called directly on a config that violates it
    for key, value in section.items():
        setattr(cfg, key, SECTIONS[key](**value) if key in SECTIONS else value)
    with pytest.raises(ValueError, match=message):
        MODES[cfg.mode].check_config(cfg)


def test_sampled_mode_takes_a_partition_store_but_reads_node_features_only_from_it():
    """It samples across the store's parts (``sampled/remote.py``); encodings and edge features are not fetched."""
    assert DsgraphConfig.from_dict({"mode": "sampled", "partitions": "store"}).partitions == "store"
    for model in ({"encodings": ["degree"]}, {"edge_features": "bias"}):
        with pytest.raises(
            ValueError, match=r"mode 'sampled' from a partition store \('partitions'\) reads node features"
        ):
            DsgraphConfig.from_dict({"mode": "sampled", "partitions": "store", "model": model})


def test_a_mode_checks_only_when_it_runs():
    cfg = DsgraphConfig.from_dict({"layers": 3, "sampled": {"fanouts": [5, 5]}, "isolated": {"repart_every": 4}})
    assert cfg.mode == "full"
    MODES["full"].check_config(cfg)


def test_isolated_super_epoch_sync_checkpoints_only_at_super_epoch_boundaries():
    local = DsgraphConfig.from_dict({"mode": "isolated", "eval_every": 5, "isolated": {"repart_every": 5}})
    every_step = DsgraphConfig.from_dict({"mode": "isolated", "isolated": {"repart_every": 5, "sync": "step"}})
    isolated = MODES["isolated"]
    assert [e for e in range(12) if isolated.can_checkpoint(local, e)] == [4, 9]
    assert all(isolated.can_checkpoint(every_step, e) for e in range(12))
    for name in ("full", "sampled"):
        assert all(MODES[name].can_checkpoint(local, e) for e in range(12))


def test_edge_values_follow_whether_the_mode_runs_the_strategy(monkeypatch):
    """A sampled run's attention is the plain op on a graph one rank holds whole: 'bias_value' runs
    with any strategy; the full-graph and isolated modes run the strategy, which must take them
    (every shipped strategy does: one is made to refuse them here)."""
    assert [m.name for m in MODES.values() if not m.uses_strategy] == ["sampled"]
    monkeypatch.setattr(get_strategy("a2a"), "edge_values", False)
    settings = {"strategy": "a2a", "model": {"edge_features": "bias_value"}}
    assert DsgraphConfig.from_dict({**settings, "mode": "sampled"}).strategy == "a2a"
    for mode in ("full", "isolated"):
        with pytest.raises(ValueError, match="'bias_value' .* runs with strategy .*not 'a2a'"):
            DsgraphConfig.from_dict({**settings, "mode": mode})
