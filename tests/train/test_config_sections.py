"""The config's sections by owner: 'parallel' (the strategies') and 'agp' (AGP's), their older
top-level spellings, command-line overrides, and the strategy registry's 'auto'."""

import subprocess
import sys

import pytest

from dsgraph.agp.config import AgpConfig
from dsgraph.parallel import ParallelConfig, registry
from dsgraph.train.config import SECTIONS, DsgraphConfig, with_overrides
from dsgraph.train.main import parse_args, with_options

FLAT = [  # (older top-level key, its section, its key there, a value other than the default)
    ("comm_dtype", "parallel", "comm_dtype", "bf16"),
    ("comm_grad_dtype", "parallel", "comm_grad_dtype", "int8"),
    ("comm_chunks", "parallel", "comm_chunks", 4),
    ("regather_kv", "parallel", "regather_kv", True),
    ("partition_method", "parallel", "partition_method", "metis"),
    ("agp_profile", "agp", "profile", "profile.json"),
    ("agp_recalibrate_after", "agp", "recalibrate_after", 0),
    ("launch_plan", "agp", "plan", "plan.json"),
]


def test_every_flat_key_of_the_sections_is_covered():
    covered = {(section, old) for old, section, _, _ in FLAT}
    assert covered == {(s, old) for s in ("parallel", "agp") for old in SECTIONS[s].FLAT_KEYS}
    assert SECTIONS["parallel"] is ParallelConfig and SECTIONS["agp"] is AgpConfig


@pytest.mark.parametrize("old, section, key, value", FLAT)
def test_a_flat_key_and_its_nested_spelling_are_the_same_setting(old, section, key, value):
    flat = DsgraphConfig.from_dict({old: value})
    nested = DsgraphConfig.from_dict({section: {key: value}})
    assert getattr(getattr(flat, section), key) == value
    assert flat == nested
    assert getattr(flat, section) != SECTIONS[section]()  # the value is not the default


@pytest.mark.parametrize("old, section, key, value", FLAT)
def test_a_key_given_both_ways_is_an_error_naming_both(old, section, key, value):
    with pytest.raises(ValueError, match=f"'{old}' and '{section}.{key}' are the same setting"):
        DsgraphConfig.from_dict({old: value, section: {key: value}})


@pytest.mark.parametrize(
    "section, message",
    [
        ({"parallel": {"comm_dtyp": "bf16"}}, r"unknown key\(s\) 'comm_dtyp' in 'parallel'; valid keys: comm_dtype"),
        ({"agp": {"agp_profile": "p.json"}}, r"unknown key\(s\) 'agp_profile' in 'agp'; valid keys: profile"),
        ({"parallel": {"comm_dtype": "fp8"}}, r"'parallel': 'comm_dtype' must be one of none, bf16, int8"),
        ({"parallel": {"comm_chunks": 0}}, r"'parallel': 'comm_chunks' must be >= 1"),
        ({"parallel": {"partition_method": "spectral"}}, r"'parallel': 'partition_method' must be one of metis"),
        ({"parallel": {"regather_kv": "yes"}}, r"'parallel.regather_kv' must be bool"),
        ({"agp": {"recalibrate_after": -1}}, r"'agp': 'recalibrate_after' must be >= 0"),
        ({"agp": "p.json"}, r"'agp' must be a JSON object"),
    ],
)
def test_bad_section_values_are_named(section, message):
    with pytest.raises(ValueError, match=message):
        DsgraphConfig.from_dict(section)


def test_overrides_in_either_spelling_replace_only_the_keys_they_name():
    cfg = DsgraphConfig.from_dict({"parallel": {"comm_dtype": "bf16", "comm_chunks": 2}, "agp": {"profile": "a.json"}})
    again = with_overrides(cfg, {"comm_chunks": 4, "agp": {"recalibrate_after": 0}, "epochs": 3})
    assert again.parallel == ParallelConfig(comm_dtype="bf16", comm_chunks=4)
    assert again.agp == AgpConfig(profile="a.json", recalibrate_after=0)
    assert again.epochs == 3


def test_command_line_options_override_the_sections():
    """main.py's options carry the older flat keys as their ``dest``; they replace the file's nested values."""
    args = parse_args(
        ["--config", "c.json", "--strategy", "auto", "--agp-profile", "cli.json", "--partition-method", "metis"]
    )
    cfg = with_options(
        DsgraphConfig.from_dict({"agp": {"profile": "file.json"}, "parallel": {"partition_method": "random"}}), args
    )
    assert (cfg.strategy, cfg.agp.profile, cfg.parallel.partition_method) == ("auto", "cli.json", "metis")


def test_auto_is_listed_by_the_registry_itself():
    """Listed in the registry's table (by import path), not added by importing dsgraph.agp."""
    assert "dsgraph.agp.auto:Auto" in registry.BUILTIN
    assert "auto" in registry.strategy_names() and "auto" not in registry.auto_candidates()
    with open("dsgraph/agp/__init__.py") as f:
        assert "register(" not in f.read()


@pytest.mark.slow
def test_a_fresh_interpreter_lists_auto_without_importing_agp_first():
    code = "from dsgraph.parallel import get_strategy as g, strategy_names as s; print(s()[-1], g('auto').name)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["auto", "auto"]
