"""tools/gpu/train_check.py on the CPU: the run matrix, configs, commands, loss comparison, and
one real run compared with itself."""

import json

import pytest

from dsgraph.agp.profile import load_profile
from dsgraph.train.config import load_ds_config
from tools.gpu import train_check as tool


def test_matrix_covers_every_one_rank_strategy_in_both_dtypes():
    specs = tool.run_specs()
    assert len({s.name for s in specs}) == len(specs) == 15
    for dtype in ("fp32", "bf16"):
        assert {s.strategy for s in specs if s.dtype == dtype and s.dataset == "cora"} == set(tool.STRATEGIES)
    assert [(s.strategy, s.dtype) for s in specs if s.dataset == "rmat:20"] == [("ag", "bf16")]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_configs_are_valid_and_set_the_dtype(tmp_path, dtype):
    spec = tool.RunSpec(f"cora-{dtype}-ag", "ag", dtype, "cora", 5)
    ds, cfg = load_ds_config(str(tool.write_config(spec, tmp_path)))
    assert ds["bf16"]["enabled"] is (dtype == "bf16")
    assert ds["optimizer"]["params"]["torch_adam"] is True and ds["zero_optimization"]["stage"] == 2
    assert cfg.dataset == "cora"


def test_checkpointed_runs_recompute_transformer_blocks(tmp_path):
    [spec] = [s for s in tool.run_specs() if s.name == "cora-bf16-ag-checkpointed"]
    ds, cfg = load_ds_config(str(tool.write_config(spec, tmp_path)))
    assert cfg.checkpoint_activations and cfg.checkpoint_nested and cfg.model.block == "transformer"
    assert ds["bf16"]["enabled"] and cfg.strategy == "ag"


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_isolated_configs_are_ones_isolated_mode_accepts(tmp_path, dtype):
    """Local steps (the default isolated_sync) need ZeRO-0 without bf16; bf16 checks the per-step sync."""
    ds, cfg = load_ds_config(
        str(tool.write_config(tool.RunSpec(f"cora-{dtype}-isolated", "isolated", dtype, "cora", 5), tmp_path))
    )
    if dtype == "fp32":
        assert (
            ds["zero_optimization"]["stage"] == 0 and not ds["bf16"]["enabled"] and cfg.isolated.sync == "super_epoch"
        )
    else:
        assert cfg.isolated.sync == "step"


def test_commands_use_the_cli_and_a_matching_agp_profile(tmp_path):
    for spec in tool.run_specs():
        cmd = tool.command(spec, tmp_path / "c.json", tmp_path / "m.jsonl", "cuda", 29700)
        assert cmd[1:4] == ["-m", "deepspeed.launcher.runner", "--master_port"] and "--num_gpus" in cmd
        assert cmd[cmd.index("--strategy") + 1] == spec.strategy and cmd[cmd.index("--backend") + 1] == "cuda"
        if spec.strategy == "auto":
            profile = load_profile(cmd[cmd.index("--agp-profile") + 1])
            profile.check_matches("cuda", {"fp32": "float32", "bf16": "bfloat16"}[spec.dtype])
            assert 1 in profile.ranks
    cpu = tool.command(tool.run_specs()[0], tmp_path / "c.json", tmp_path / "m.jsonl", "cpu", 29700)
    assert "--num_accelerators" in cpu and cpu[cpu.index("--backend") + 1] == "cpu"


def _run(losses, strategy="ag", dtype="fp32", rc=0, decision=None):
    return {
        "name": "x",
        "strategy": strategy,
        "dtype": dtype,
        "returncode": rc,
        "losses": losses,
        "agp_decision": decision,
    }


@pytest.mark.parametrize(
    "run, ref, same, status, reason",
    [
        (_run([2.0, 1.9]), _run([2.0, 1.9001]), True, "PASSED", ""),
        (_run([2.0, 1.9]), _run([2.0, 1.95]), True, "FAILED", "loss differs by"),
        (_run([2.0, 1.9], dtype="bf16"), _run([2.0, 1.93], dtype="bf16"), True, "PASSED", ""),
        (_run([2.0, 1.9], dtype="bf16"), _run([2.0, 2.0], dtype="bf16"), True, "FAILED", "loss differs by"),
        (_run([2.0]), _run([2.0, 1.9]), True, "FAILED", "1 step losses, the reference has 2"),
        (_run([2.0, float("nan")]), _run([2.0, 1.9]), True, "FAILED", "non-finite loss"),
        (_run([2.0], rc=1), _run([2.0]), True, "FAILED", "exit code 1"),
        (_run([2.0]), _run([2.0]), False, "FAILED", "other sources"),
        (_run([2.0]), None, True, "FAILED", "no usable reference"),
        (
            _run([2.0], "auto", decision="ag (fallback: no profile)"),
            _run([2.0]),
            True,
            "FAILED",
            "did not use its profile",
        ),
        (_run([2.0], "auto", decision="ag (auto: fastest)"), _run([2.0]), True, "PASSED", ""),
    ],
)
def test_compare(run, ref, same, status, reason):
    verdict = tool.compare(run, ref, same)
    assert verdict["status"] == status and reason in verdict["reason"]


def test_fingerprint_follows_the_sources(tmp_path):
    for top in ("dsgraph", "launch", "ds_configs", "tools/gpu", "docs/agp"):
        (tmp_path / top).mkdir(parents=True)
    for rel in (
        "dsgraph/a.py",
        "launch/train.py",
        "ds_configs/gpu_quickstart.json",
        "tools/gpu/train_check.py",
        "docs/agp/dgx_h100_8gpu_profile.json",
        "docs/agp/dgx_h100_8gpu_bf16_profile.json",
    ):
        (tmp_path / rel).write_text(rel)
    before = tool.fingerprint(tmp_path)
    assert tool.fingerprint(tmp_path) == before
    (tmp_path / "dsgraph/a.py").write_text("changed")
    assert tool.fingerprint(tmp_path) != before


def test_unknown_run_name_is_refused():
    with pytest.raises(SystemExit, match="unknown run"):
        tool.select(tool.run_specs(), "cora-fp32-ring")


@pytest.mark.slow
def test_a_cpu_run_matches_itself(tmp_path):
    """One real run through the deepspeed launcher, then the same run compared with it."""
    ref, out = tmp_path / "ref.json", tmp_path / "out.json"
    args = ["--device", "cpu", "--only", "cora-fp32-ag", "--cora-epochs", "2", "--timeout", "300", "--port", "29690"]
    assert tool.main(args + ["--out", str(ref)]) == 0
    first = json.loads(ref.read_text())["runs"][0]
    assert first["returncode"] == 0 and len(first["losses"]) == 2
    assert tool.main(args + ["--out", str(out), "--reference", str(ref)]) == 0
    assert json.loads(out.read_text())["runs"][0]["check"]["max_rel_diff"] < 1e-6
