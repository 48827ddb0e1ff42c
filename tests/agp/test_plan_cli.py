"""``dsgraph plan``: the table, the pick and the errors, from a synthetic profile (no processes)."""

import json

from dsgraph.agp.synthetic import linear_profile
from dsgraph.cli import main
from dsgraph.parallel import auto_candidates

PER_BYTE = {"all_gather": 1e-9, "reduce_scatter": 1e-9, "all_to_all": 1e-9, "all_to_all_uneven": 1e-9}


def _profile(tmp_path, **kw):
    path = str(tmp_path / "profile.json")
    linear_profile(
        max_ranks=4,
        attention_s_per_edge_head=1e-8,
        rest_s_per_mac=1e-12,
        collective_s_per_byte=PER_BYTE,
        system={"memory_capacity_bytes": 2**34, "description": "test"},
        **kw,
    ).save(path)
    return path


def test_plan_prints_table_pick_and_scaling_test(tmp_path, capsys):
    out_json = tmp_path / "plan.json"
    rc = main(
        [
            "plan",
            "--profile",
            _profile(tmp_path),
            "--world-size",
            "4",
            "--nodes",
            "1e5",
            "--edges",
            "2e6",
            "--heads",
            "6",
            "--hidden",
            "96",
            "--classes",
            "47",
            "--json",
            str(out_json),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0
    assert "infeasible: H % p != 0: 6 heads do not split over 4 ranks" in text
    assert "infeasible: no partition into 2 parts for halo" in text
    assert "choice over p = 1..4:" in text and "pick " in text and "scaling test" in text
    plan = json.loads(out_json.read_text())
    assert len(plan["table"]) == 4 * len(auto_candidates()) and plan["pick_at_world_size"]["p"] == 4


def test_plan_with_a_dataset_has_halo_sizes(tmp_path, capsys):
    rc = main(
        [
            "plan",
            "--profile",
            _profile(tmp_path),
            "--world-size",
            "2",
            "--dataset",
            "cora",
            "--halo-method",
            "contiguous",
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0 and "N=2,708" in text
    assert "no partition" not in text


def test_plan_errors(tmp_path, capsys):
    assert (
        main(["plan", "--profile", str(tmp_path / "none.json"), "--world-size", "2", "--nodes", "10", "--edges", "10"])
        == 2
    )
    assert "no such AGP profile" in capsys.readouterr().err
    assert main(["plan", "--profile", _profile(tmp_path), "--world-size", "8", "--nodes", "10", "--edges", "10"]) == 2
    assert "covers rank counts up to 4, not world size 8" in capsys.readouterr().err
    assert (
        main(
            [
                "plan",
                "--profile",
                _profile(tmp_path),
                "--world-size",
                "2",
                "--nodes",
                "10",
                "--edges",
                "10",
                "--dtype",
                "bfloat16",
            ]
        )
        == 2
    )
    assert "measured in float32, but this run uses bfloat16" in capsys.readouterr().err
    assert main(["plan", "--profile", _profile(tmp_path), "--world-size", "2"]) == 2
    assert "give --dataset, or both --nodes and --edges" in capsys.readouterr().err
    assert (
        main(
            [
                "plan",
                "--profile",
                _profile(tmp_path),
                "--world-size",
                "2",
                "--nodes",
                "10",
                "--edges",
                "10",
                "--head",
                "attention",
            ]
        )
        == 2
    )
    assert "--head attention needs the class count" in capsys.readouterr().err
