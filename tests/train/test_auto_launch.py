"""``dsgraph train --nprocs auto``: the launcher plans with a (fake) profile under a (fake) memory
limit, prints the candidates and launches the pick's rank count with the plan; the ranks refuse a
launched world other than the pick's, naming the command that launches it. No process is started:
the deepspeed launcher is replaced by a recorder."""

import json
import sys

import pytest

from dsgraph.agp.launch import LaunchPlan
from dsgraph.agp.synthetic import linear_profile
from dsgraph.train import launcher
from dsgraph.train import main as train_main

DEAR_COMM = {"all_gather": 1e-5, "reduce_scatter": 1e-5, "all_to_all": 1e-5, "all_to_all_uneven": 1e-5}


class Launched(Exception):
    pass


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A fp32 config on rmat:12, a profile where one rank is fastest, and a recorder for the launch."""
    config = tmp_path / "run.json"
    config.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": 1,
                "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
                "dsgraph": {"dataset": "rmat:12", "hidden": 32, "heads": 4},
            }
        )
    )
    profile = tmp_path / "profile.json"
    linear_profile(
        max_ranks=2,
        attention_s_per_edge_head=1e-8,
        rest_s_per_mac=1e-10,
        collective_s_per_byte=DEAR_COMM,
        backend="cpu",
    ).save(str(profile))
    launched = {}

    def record(module, nprocs, args, port):
        launched.update(module=module, nprocs=nprocs, args=args)
        raise Launched

    monkeypatch.setattr(launcher, "run_deepspeed", record)
    return config, profile, launched


def _auto(config, profile, tmp_path, *more):
    plan = str(tmp_path / "plan.json")
    argv = ["--nprocs", "auto", "--max-nprocs", "2", "--profile", str(profile), "--config", str(config)]
    return launcher.main([*argv, "--plan-out", plan, "--epochs", "3", *more]), plan


def test_launches_the_pick_with_its_plan(setup, tmp_path, capsys, monkeypatch):
    config, profile, launched = setup
    monkeypatch.setenv("DSGRAPH_MEMORY_LIMIT_MB", "100000")
    with pytest.raises(Launched):
        _auto(config, profile, tmp_path)
    out = capsys.readouterr().out
    assert "candidates for rmat:12" in out and "pick ag on 1 ranks" in out
    plan = LaunchPlan.load(str(tmp_path / "plan.json"))
    assert (plan.strategy, plan.ranks) == ("ag", 1)
    assert launched["nprocs"] == 1 and launched["module"] == "dsgraph.train.main"
    assert launched["args"][-2:] == ["--launch-plan", str(tmp_path / "plan.json")]
    assert "--epochs" in launched["args"]


def test_a_memory_limit_that_one_rank_exceeds_launches_two(setup, tmp_path, capsys, monkeypatch):
    config, profile, launched = setup
    monkeypatch.setenv("DSGRAPH_MEMORY_LIMIT_MB", "100000")
    with pytest.raises(Launched):
        _auto(config, profile, tmp_path)
    peaks = {c["ranks"]: c["peak_mb"] for c in LaunchPlan.load(str(tmp_path / "plan.json")).candidates}
    monkeypatch.setenv("DSGRAPH_MEMORY_LIMIT_MB", str((peaks[1] + peaks[2]) / 2))
    with pytest.raises(Launched):
        _auto(config, profile, tmp_path)
    assert launched["nprocs"] == 2
    assert "over the limit" in capsys.readouterr().out


def test_plan_only_prints_the_commands_and_launches_nothing(setup, tmp_path, capsys, monkeypatch):
    config, profile, launched = setup
    monkeypatch.setenv("DSGRAPH_MEMORY_LIMIT_MB", "100000")
    code, plan = _auto(config, profile, tmp_path, "--plan-only")
    out = capsys.readouterr().out
    assert code == 0 and not launched
    command = f"deepspeed --num_accelerators 1 launch/train.py --deepspeed_config {config} --epochs 3"
    assert f"{command} --launch-plan {plan}" in out


def test_refusals(setup, tmp_path, capsys, monkeypatch):
    config, profile, launched = setup
    code, _ = _auto(config, profile, tmp_path, "--strategy", "halo")
    assert code == 2 and "leave out --strategy" in capsys.readouterr().err
    monkeypatch.setenv("DSGRAPH_MEMORY_LIMIT_MB", "1")
    code, _ = _auto(config, profile, tmp_path)
    assert code == 2 and "no (strategy, ranks) is predicted to fit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        launcher.main(["--nprocs", "2", "--plan-only", "--config", str(config)])
    assert "go with --nprocs auto" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        launcher.main(["--nprocs", "auto", "--min-nprocs", "1", "--max-restarts", "1", "--config", str(config)])
    assert "give --nprocs N to restart on fewer" in capsys.readouterr().err
    assert not launched


def test_a_launched_world_larger_than_the_plan_is_refused_with_the_command(setup, tmp_path, capsys, monkeypatch):
    config, profile, _ = setup
    monkeypatch.setenv("DSGRAPH_MEMORY_LIMIT_MB", "100000")
    _auto(config, profile, tmp_path, "--plan-only")
    plan = str(tmp_path / "plan.json")
    argv = ["launch/train.py", "--local_rank=0", "--deepspeed_config", str(config), "--launch-plan", plan]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "0")
    assert train_main.main(argv[1:]) == 2
    err = capsys.readouterr().err
    assert f"{plan} picks ag on 1 ranks, but this job has 4 (the extra ranks would only wait)" in err
    assert f"launch the pick: deepspeed --num_accelerators 1 launch/train.py --deepspeed_config {config}" in err
