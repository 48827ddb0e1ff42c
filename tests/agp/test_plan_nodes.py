"""Planning across nodes: ``dsgraph plan`` beyond one node, the memory and time terms, the
node-then-rank split, and the placement-aware variants (synthetic and shipped profiles, no processes)."""

import dataclasses
import json
import math
import os

import pytest

from dsgraph.agp.hierarchy import estimated_node_split, node_then_rank_split
from dsgraph.agp.model import GraphShape, ModelShape, predict
from dsgraph.agp.placements import A2AAllGather, A2AHalo, predict_variants
from dsgraph.agp.synthetic import linear_fit, linear_profile
from dsgraph.agp.tiers import Hierarchy, InterTier, Tier
from dsgraph.cli import main
from tests.graphs import random_graph

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "agp")
BF16 = os.path.join(DOCS, "dgx_h100_8gpu_bf16_profile.json")
PAPERS = [
    "--nodes",
    "111e6",
    "--edges",
    "1.6e9",
    "--layers",
    "3",
    "--hidden",
    "128",
    "--heads",
    "8",
    "--in-dim",
    "128",
    "--classes",
    "172",
    "--halo-fraction",
    "0.05",
    "--dtype",
    "bfloat16",
    "--block",
    "transformer",
    "--head",
    "linear",
    "--input-projection",
    "--global-attention",
    "none",
    "--checkpoint-every",
    "1",
]
PER_BYTE = {"all_gather": 1e-10, "reduce_scatter": 1e-10, "all_to_all": 2e-10, "all_to_all_uneven": 2e-10}


def node_profile(g=2, max_ranks=4, link_s_per_byte=1e-9):
    flat = linear_profile(
        max_ranks=max_ranks,
        attention_s_per_edge_head=1e-9,
        rest_s_per_mac=1e-12,
        collective_s_per_byte=PER_BYTE,
        system={"memory_capacity_bytes": 2**34, "description": "test"},
    )
    h = Hierarchy(
        g,
        Tier("test intra", "measured", "synthetic"),
        InterTier(
            "test inter", "projected", "synthetic", links_per_node=g, link=linear_fit(link_s_per_byte, 1e-5, 10, 34)
        ),
    )
    return dataclasses.replace(flat, hierarchy=h)


def test_acceptance_papers100m_on_four_nodes_of_eight(tmp_path, capsys):
    out = tmp_path / "plan.json"
    rc = main(["plan", "--profile", BF16, "--world-size", "32", "--ranks-per-node", "8", *PAPERS, "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    pick = json.loads(out.read_text())["pick_at_world_size"]
    assert pick["feasible"] and pick["p"] == 32 and pick["nodes"] == 4
    assert pick["memory_bytes"] < 80e9 and math.isfinite(pick["time_s"]) and pick["time_s"] > 0
    assert sum(pick["memory_terms"].values()) == pytest.approx(pick["memory_bytes"])
    assert sum(pick["time_terms"].values()) == pytest.approx(pick["time_s"])
    for term in ("activations", "checkpoints", "halo", "features", "graph", "optimizer states"):
        assert term in text
    assert (
        "[projected] InfiniBand NDR" in text
        and "[projected] NVLink 4" in text
        and "[assumed] halo per rank: 0.05" in text
    )
    assert "[estimated] cross-node halo p=32" in text
    assert "placement-aware variants" in text and "a2a|halo" in text
    # the next-smaller configuration that does not fit is one node, and nested checkpointing makes it fit
    assert "p=8 does not fit" in text and "with --checkpoint-nested: halo@8 fits" in text


def test_one_node_figures_are_unchanged(tmp_path, capsys):
    """The 8-GPU papers100M figures (halo@8 81.9 GiB; nested 72.0 GiB, 1.42 s) come out as before."""
    out = tmp_path / "plan.json"
    assert (
        main(["plan", "--profile", BF16, "--world-size", "8", *PAPERS, "--checkpoint-nested", "--json", str(out)]) == 0
    )
    pick = json.loads(out.read_text())["pick_at_world_size"]
    assert pick["strategy"] == "halo" and pick["memory_bytes"] / 2**30 == pytest.approx(72.0, abs=0.05)
    assert pick["time_s"] == pytest.approx(1.42, abs=0.005)


def test_world_sizes_that_are_not_whole_nodes_and_single_tier_profiles(tmp_path, capsys):
    assert main(["plan", "--profile", BF16, "--world-size", "12", *PAPERS]) == 2
    assert "not 1..8 or whole nodes of 8 ranks" in capsys.readouterr().err
    flat = str(tmp_path / "flat.json")
    linear_profile(
        max_ranks=2, attention_s_per_edge_head=1e-9, rest_s_per_mac=1e-12, collective_s_per_byte=PER_BYTE
    ).save(flat)
    assert (
        main(
            [
                "plan",
                "--profile",
                flat,
                "--world-size",
                "4",
                "--ranks-per-node",
                "2",
                "--nodes",
                "1e4",
                "--edges",
                "1e5",
                "--classes",
                "4",
            ]
        )
        == 2
    )
    assert "has one tier" in capsys.readouterr().err


def test_ranks_per_node_and_a_loaded_graph_get_a_measured_node_split(tmp_path, capsys):
    path = str(tmp_path / "nodes.json")
    node_profile(g=2, max_ranks=2).save(path)
    out = tmp_path / "plan.json"
    assert main(["plan", "--profile", path, "--world-size", "4", "--dataset", "cora", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "system: nodes of 2 ranks; rank counts 1, 2, 4" in text
    assert "[measured] cross-node halo p=4" in text and "metis into 2 node parts, then each into 2 ranks" in text
    assert "[projected] test inter: synthetic" in text
    table = json.loads(out.read_text())["table"]
    halo4 = next(x for x in table if x["strategy"] == "halo" and x["p"] == 4)
    assert halo4["feasible"] and halo4["nodes"] == 2 and halo4["inter_node_bytes"] > 0


def test_default_attention_head_over_many_classes_says_which_flags(capsys):
    rc = main(
        [
            "plan",
            "--profile",
            BF16,
            "--world-size",
            "8",
            *[
                a
                for a in PAPERS
                if a not in ("transformer", "linear") and a not in ("--block", "--head", "--input-projection")
            ],
            "--block",
            "attention",
            "--head",
            "attention",
            "--no-input-projection",
        ]
    )
    text = capsys.readouterr().out
    assert rc == 2  # nothing fits with the GAT-shaped model and its attention head
    assert "H x pad(C) = 8 x 172 = 1,376 values per node" in text
    assert "--block transformer --head linear --input-projection" in text
    assert "with --head linear:" in text


@pytest.mark.parametrize("checkpoint_every, nested", [(0, False), (1, False), (1, True), (2, False)])
def test_terms_sum_to_the_totals(checkpoint_every, nested):
    profile = node_profile(g=2, max_ranks=2)
    model = ModelShape(
        layers=3,
        hidden=64,
        heads=4,
        in_dim=32,
        num_classes=7,
        checkpoint_every=checkpoint_every,
        checkpoint_nested=nested,
        block="transformer",
    )
    graph = GraphShape.from_counts(20_000, 200_000, [1, 2, 4, 6], halo_fraction=0.1)
    graph.partitions[4] = estimated_node_split(20_000, 200_000, 4, 2, 0.1)
    for p in (1, 2, 4, 6):
        for s in ("ag", "a2a", "halo", "ag_ring"):
            if s == "a2a" and 4 % p:
                continue
            x = predict(s, p, graph, model, profile)
            assert x.feasible, x.reason
            assert sum(x.memory_terms.values()) == pytest.approx(x.memory_bytes)
            assert sum(x.time_terms.values()) == pytest.approx(x.time_s)
            assert (x.inter_node_bytes > 0) == (p > 2) and x.nodes == max(1, p // 2)


def test_halo_knows_its_cross_node_share():
    profile = node_profile(g=2, max_ranks=2, link_s_per_byte=1e-8)
    model = ModelShape(layers=2, hidden=64, heads=4)
    graph = GraphShape.from_counts(40_000, 400_000, [4], halo_fraction=0.1)
    uniform = predict("halo", 4, graph, model, profile)
    graph.partitions[4] = estimated_node_split(40_000, 400_000, 4, 2, 0.1, cross_node_share=0.1)
    local = predict("halo", 4, graph, model, profile)
    assert local.inter_node_bytes < uniform.inter_node_bytes and local.comm_s < uniform.comm_s
    assert local.memory_bytes == pytest.approx(uniform.memory_bytes)  # the same halo rows, from nearer ranks


def test_node_then_rank_split_of_a_graph():
    graph = random_graph(600, 6000, seed=3).with_self_loops()
    split = node_then_rank_split(graph, 4, 2)
    assert sum(split.part_nodes) == 600 and sum(split.part_edges) == graph.num_edges and split.ranks_per_node == 2
    assert all(0 <= i <= h for i, h in zip(split.inter_halo_sizes, split.halo_sizes))
    for k in range(2):  # a node's halo is the union of its ranks' cross-node halos
        ranks = split.inter_halo_sizes[2 * k : 2 * k + 2]
        assert max(ranks) <= split.node_halo_sizes[k] <= sum(ranks)
    with pytest.raises(ValueError, match="whole nodes"):
        node_then_rank_split(graph, 3, 2)


def test_placement_variants_are_costed_and_compared():
    profile = node_profile(g=2, max_ranks=2, link_s_per_byte=1e-8)
    model = ModelShape(layers=2, hidden=64, heads=4)
    graph = GraphShape.from_counts(40_000, 400_000, [4], halo_fraction=0.05)
    graph.partitions[4] = estimated_node_split(40_000, 400_000, 4, 2, 0.05)
    a2a = predict("a2a", 4, graph, model, profile)
    mixed = predict("a2a|halo", 4, graph, model, profile, spec=A2AHalo(2))
    gathered = predict("a2a|ag", 4, graph, model, profile, spec=A2AAllGather(2))
    assert a2a.feasible and mixed.feasible and gathered.feasible
    # inside a node the head split is the same; between nodes only the node's halo travels, so fewer bytes cross
    assert mixed.inter_node_bytes < a2a.inter_node_bytes
    assert mixed.memory_terms["graph"] < a2a.memory_terms["graph"]  # the node's graph, not the whole graph
    assert gathered.memory_terms["K/V replicas"] == pytest.approx(
        2 * 40_000 * (2 * 64 / 2) * 4
    )  # per layer N x 2d/g in fp32
    assert predict("a2a|halo", 2, graph, model, profile, spec=A2AHalo(2)).reason.startswith(
        "a placement across whole nodes"
    )
    assert [v.p for v in predict_variants(graph, model, profile, [1, 2, 4])] == [4, 4]


def test_plans_page_holds_the_table_its_commands_give():
    from tools.reports import agp_plans as plans

    with open(os.path.join(DOCS, "plans.md")) as f:
        page = f.read()
    assert plans.table() in page
    for line in plans.commands().splitlines():
        assert "    " + line in page
