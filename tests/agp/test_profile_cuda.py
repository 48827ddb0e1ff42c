"""`dsgraph profile --backend cuda` without a GPU: options, the collectives merge, the timing helper."""

import json
import time

import pytest
import torch

from dsgraph.agp import measure, profile_cli
from dsgraph.agp.profile import load_profile, with_collectives_from
from dsgraph.agp.spawn import check_comm
from dsgraph.agp.synthetic import linear_profile

PER_BYTE = {"all_gather": 1e-9, "reduce_scatter": 1e-9, "all_to_all": 2e-9, "all_to_all_uneven": 2e-9}
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a GPU")


def _profile(max_ranks, attention=1e-8, per_byte=PER_BYTE, dtype="bfloat16", description="synthetic"):
    return linear_profile(
        max_ranks=max_ranks,
        attention_s_per_edge_head=attention,
        rest_s_per_mac=1e-11,
        collective_s_per_byte=per_byte,
        dtype=dtype,
        system={"description": description},
    )


def test_cuda_options_parse():
    args = profile_cli.build_parser().parse_args(
        ["--backend", "cuda", "--dtype", "bfloat16", "--collectives-from", "other.json", "--max-ranks", "8"]
    )
    assert (args.backend, args.dtype, args.collectives_from, args.max_ranks) == ("cuda", "bfloat16", "other.json", 8)
    assert profile_cli.build_parser().parse_args([]).max_ranks is None


def test_default_rank_counts():
    parse = profile_cli.build_parser().parse_args
    assert profile_cli.resolve_max_ranks(parse([]), None) == 4
    assert profile_cli.resolve_max_ranks(parse(["--backend", "cuda"]), _profile(8)) == 8
    assert profile_cli.resolve_max_ranks(parse(["--backend", "cuda", "--max-ranks", "3"]), _profile(8)) == 3


def test_merge_takes_collectives_from_the_other_profile_and_compute_from_p1(tmp_path):
    measured = _profile(1, attention=3e-9, description="one H200")
    other = _profile(8, attention=1e-6, per_byte={c: 5e-11 for c in PER_BYTE}, dtype="float32", description="DGX H100")
    merged = with_collectives_from(measured, other, 8)
    assert sorted(merged.ranks) == list(range(1, 9))
    for p in range(2, 9):
        assert merged.ranks[p].attention == measured.ranks[1].attention
        assert merged.ranks[p].rest == measured.ranks[1].rest
        assert merged.ranks[p].collectives == other.ranks[p].collectives
    assert merged.dtype == "bfloat16" and merged.backend == measured.backend
    src = merged.system["collectives_source"]
    assert src["ranks"] == list(range(2, 9)) and src["description"] == "DGX H100" and src["file"] == other.source
    assert merged.system["ranks_measured"] == [1]
    assert "collectives for p = 2..8 from" in merged.system["description"]
    path = tmp_path / "merged.json"
    merged.save(str(path))
    loaded = load_profile(str(path))
    assert loaded.ranks[5].collectives["all_to_all"](2.0**20) == pytest.approx(
        other.ranks[5].collectives["all_to_all"](2.0**20)
    )
    assert json.loads(path.read_text())["system"]["collectives_source"]["ranks"] == list(range(2, 9))


def test_merge_keeps_measured_rank_counts_and_names_missing_ones():
    measured = _profile(2, attention=3e-9)
    other = _profile(4, attention=1e-6, per_byte={c: 5e-11 for c in PER_BYTE})
    merged = with_collectives_from(measured, other, 4)
    assert merged.ranks[2] == measured.ranks[2] and merged.ranks[3].collectives == other.ranks[3].collectives
    assert with_collectives_from(measured, other, 2) is measured  # nothing to merge
    with pytest.raises(ValueError, match=r"covers rank counts \[1, 2, 3, 4\], but rank counts \[5, 6\] are needed"):
        with_collectives_from(measured, other, 6)


def test_timing_helper_on_the_cpu():
    seconds = measure.timed(lambda: time.sleep(0.05), torch.device("cpu"))
    assert 0.05 <= seconds < 1.0


def test_gpu_sizes_reach_past_launch_latency():
    cpu, cuda = measure.sizes_for(torch.device("cpu")), measure.sizes_for(torch.device("cuda"))
    assert (
        max(cuda.attention_nodes) * measure.ATTENTION_DEGREE
        >= 2**24
        > max(cpu.attention_nodes) * measure.ATTENTION_DEGREE
    )
    assert measure.rank_device(1, "cuda") == torch.device("cuda", 1) and measure.rank_device(1, "cpu").type == "cpu"


@NO_GPU
def test_cuda_without_a_gpu_is_a_clear_value_error(capsys):
    with pytest.raises(ValueError, match=r"--backend cuda needs a CUDA GPU.*this machine has none"):
        measure.measure_profile(max_ranks=1, backend="cuda")
    assert profile_cli.main(["--backend", "cuda", "--out", "unused.json"]) == 2
    err = capsys.readouterr().err
    assert "dsgraph profile: error: --backend cuda needs a CUDA GPU" in err and "Traceback" not in err


@NO_GPU
def test_nccl_ranks_need_gpus():
    with pytest.raises(ValueError, match="1 NCCL ranks need 1 GPUs"):
        check_comm("nccl", 1)
    with pytest.raises(ValueError, match="comm must be one of gloo, nccl"):
        check_comm("mpi", 1)
    check_comm("gloo", 4)


def _fake_gpu(monkeypatch, gpus):
    """measure_profile as if this machine had ``gpus`` GPUs: p = 1..gpus from a synthetic profile."""
    monkeypatch.setattr(measure, "measurable_ranks", lambda backend, max_ranks, head_dim: min(max_ranks, gpus))
    monkeypatch.setattr(
        measure, "measure_profile", lambda max_ranks, **kw: _profile(max_ranks, attention=3e-9, description="fake GPU")
    )


def test_one_gpu_run_merges_the_collectives_file(tmp_path, monkeypatch, capsys):
    _fake_gpu(monkeypatch, gpus=1)
    other = tmp_path / "dgx.json"
    _profile(8, attention=1e-6, description="DGX H100").save(str(other))
    out = tmp_path / "gpu.json"
    assert (
        profile_cli.main(
            ["--backend", "cuda", "--dtype", "bfloat16", "--collectives-from", str(other), "--out", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert f"rank counts [2, 3, 4, 5, 6, 7, 8]: collective fits from {other}" in printed and "(DGX H100)" in printed
    assert "p = 1..8" in printed
    assert load_profile(str(out)).system["collectives_source"]["file"] == str(other)


def test_more_ranks_than_gpus_without_a_collectives_file_is_refused(monkeypatch, capsys):
    _fake_gpu(monkeypatch, gpus=1)
    assert profile_cli.main(["--backend", "cuda", "--max-ranks", "4", "--out", "unused.json"]) == 2
    err = capsys.readouterr().err
    assert "--max-ranks 4 needs 4 GPUs for the NCCL collectives, but this machine has 1; pass --collectives-from" in err


@pytest.mark.slow
def test_cpu_profile_still_measures_end_to_end(tmp_path, capsys):
    """The shared timing path (timed, interleaved_min, run_ranks on gloo) on one CPU rank."""
    out = tmp_path / "cpu.json"
    assert profile_cli.main(["--backend", "cpu", "--max-ranks", "1", "--reps", "1", "--out", str(out)]) == 0
    profile = load_profile(str(out))
    assert (
        profile.backend == "cpu"
        and profile.system["comm_backend"] == "gloo"
        and profile.system["ranks_measured"] == [1]
    )
    points = profile.ranks[1].attention.points  # every size at in-degree 16, the largest again at 4 and at H / 4,
    expected = len(measure.CPU_SIZES.attention_nodes) + 2 * measure.SHAPE_SIZES  # and the source counts
    expected += len(measure.CPU_SIZES.source_case[1])
    assert all(p[-1] > 0 for p in points) and len(points) == expected
