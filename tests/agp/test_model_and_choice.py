"""The cost and memory model and the choice, on synthetic profiles (no processes)."""

import dataclasses
import math

import pytest

from dsgraph.agp.choose import choose, switch_target
from dsgraph.agp.model import (
    Calibration,
    GraphShape,
    ModelShape,
    SplitShape,
    attention_sublayer_units,
    ffn_sublayer_units,
    predict,
    predict_all,
    scaling_test,
)
from dsgraph.agp.synthetic import linear_profile
from dsgraph.parallel.config import ParallelConfig
from dsgraph.parallel.registry import get_strategy
from tests.graphs import random_graph

PER_BYTE = {"all_gather": 1e-9, "reduce_scatter": 1e-9, "all_to_all": 1e-9, "all_to_all_uneven": 1e-9}


def _profile(max_ranks=4, per_byte=PER_BYTE, attention=1e-8, **kw):
    return linear_profile(
        max_ranks=max_ranks,
        attention_s_per_edge_head=attention,
        rest_s_per_mac=1e-12,
        collective_s_per_byte=per_byte,
        head_dim=16,
        **kw,
    )


MODEL = ModelShape(layers=2, hidden=128, heads=8)
GRAPH = GraphShape(num_nodes=100_000, num_edges=2_000_000)


def test_comm_bytes_per_strategy():
    profile = _profile()
    n, d, b, L = 25_000, 128, 4, 2
    ag = predict("ag", 4, GRAPH, MODEL, profile, step=False)
    a2a = predict("a2a", 4, GRAPH, MODEL, profile, step=False)
    # GP-AG: all-gather K,V [n, 2d] forward and reduce-scatter backward; each rank sends (p-1) blocks of each
    assert ag.comm_bytes == pytest.approx(L * 2 * (n * 2 * d * b) * 3)
    # GP-A2A: q,k,v and y, forward and backward, each rank keeps 1/p of what it holds
    assert a2a.comm_bytes == pytest.approx(L * 2 * (n * 4 * d * b) * 3 / 4)
    assert predict("ag", 1, GRAPH, MODEL, profile).comm_s == 0.0


def test_attention_work_and_imbalance():
    profile = _profile(attention=1e-8)
    skewed = GraphShape(
        100_000, 2_000_000, rows={4: SplitShape([25_000] * 4, [1_400_000, 200_000, 200_000, 200_000], [0] * 4, [0] * 4)}
    )
    ag = predict("ag", 4, skewed, MODEL, profile, step=False)
    a2a = predict("a2a", 4, skewed, MODEL, profile, step=False)
    # AG waits for the rank with 70% of the edges; A2A splits heads, so every rank has E*H/p
    assert ag.attention_s / a2a.attention_s == pytest.approx(1_400_000 / 500_000, rel=0.2)


def test_attention_cost_per_head_dim_follows_the_knee():
    """An (edge, head) costs in proportion to knee + D: with knee = D0 = 16, D = 32 costs 1.5x D0."""
    linear = _profile()
    kneed = linear.replace_ranks({p: dataclasses.replace(f, head_dim_knee=16.0) for p, f in linear.ranks.items()})
    wide = ModelShape(layers=2, hidden=256, heads=8)  # head_dim 32

    def ratio(profile):
        return (
            predict("ag", 2, GRAPH, wide, profile, step=False).attention_s
            / predict("ag", 2, GRAPH, MODEL, profile, step=False).attention_s
        )

    assert ratio(linear) == pytest.approx(2.0, rel=0.05)
    assert ratio(kneed) == pytest.approx(1.5, rel=0.05)


def test_infeasible_pairs_carry_reasons():
    profile = _profile(max_ranks=4, system={"memory_capacity_bytes": 2**30, "memory_shared_by_ranks": False})
    model = ModelShape(layers=2, hidden=96, heads=6)
    preds = {(x.strategy, x.p): x for x in predict_all(GRAPH, model, profile, 4)}
    assert "H % p != 0: 6 heads do not split over 4 ranks" in preds[("a2a", 4)].reason
    assert preds[("a2a", 3)].feasible and preds[("a2a", 2)].feasible
    assert "no partition into 2 parts for halo" in preds[("halo", 2)].reason
    big = GraphShape(num_nodes=20_000_000, num_edges=100_000_000)
    over = predict("ag", 4, big, MODEL, profile)
    assert not over.feasible and over.reason.startswith("memory over capacity")
    uncovered = predict("ag", 8, GRAPH, MODEL, profile)
    assert not uncovered.feasible and "covers rank counts [1, 2, 3, 4], not 8" in uncovered.reason


def test_memory_ag_keeps_all_kv_a2a_keeps_the_whole_graph():
    profile = _profile()
    wide = GraphShape(1_000_000, 2_000_000)  # few edges, many nodes: AG's N x 2d K/V replica dominates
    dense = GraphShape(10_000, 50_000_000)  # many edges: A2A's whole-graph copy dominates
    assert predict("ag", 4, wide, MODEL, profile).memory_bytes > predict("a2a", 4, wide, MODEL, profile).memory_bytes
    assert predict("a2a", 4, dense, MODEL, profile).memory_bytes > predict("ag", 4, dense, MODEL, profile).memory_bytes
    assert predict("ag", 4, wide, MODEL, profile).memory_bytes < predict("ag", 1, wide, MODEL, profile).memory_bytes


def test_halo_uses_partition_sizes():
    profile = _profile()
    part = SplitShape(
        part_nodes=[50_000, 50_000],
        part_edges=[1_000_000, 1_000_000],
        halo_sizes=[1_000, 3_000],
        send_sizes=[3_000, 1_000],
    )
    graph = GraphShape(100_000, 2_000_000, partitions={2: part})
    x = predict("halo", 2, graph, MODEL, profile, step=False)
    assert x.comm_bytes == pytest.approx(
        2 * (3_000 + 1_000) * 256 * 4
    )  # L * (rows sent forward + halo rows' gradients back) * 2d * bytes
    assert x.comm_s < predict("ag", 2, graph, MODEL, profile, step=False).comm_s


def test_graph_shape_from_a_real_graph():
    graph = random_graph()
    shape = GraphShape.from_graph(graph, [1, 2, 4], partition_method="contiguous")
    assert sum(shape.rows[4].part_edges) == graph.num_edges
    assert shape.partitions[2].part_nodes == [52, 51]
    assert all(0 < h < graph.num_nodes for h in shape.partitions[4].halo_sizes)
    assert sum(shape.partitions[4].send_sizes) == sum(shape.partitions[4].halo_sizes)  # every halo row is sent once


def test_choice_picks_the_fastest_feasible_and_explains():
    slow_a2a = {**PER_BYTE, "all_to_all": 1e-6}
    preds = predict_all(GRAPH, MODEL, _profile(per_byte=slow_a2a), 4)
    choice = choose(preds)
    fastest = min((x for x in preds if x.feasible), key=lambda x: x.time_s)
    assert choice.best == fastest and choice.best.strategy != "a2a"  # its all-to-all is 1000x slower
    assert choice.reasons[0].startswith(f"pick {fastest.strategy} on {fastest.p} ranks")
    assert any(r.startswith("rejected halo on 2 ranks: no partition") for r in choice.reasons)
    at2 = choose(preds, world_size=2)
    assert at2.best.p == 2


def test_nothing_feasible_is_a_clear_error():
    preds = predict_all(GRAPH, ModelShape(layers=1, hidden=21, heads=3), _profile(max_ranks=2), 2)
    with pytest.raises(
        ValueError,
        match=r"no feasible graph-parallel strategy: a2a@2: H % p != 0.*halo@2: no partition"
        r".*ag@2: the profile covers rank counts \[1\], not 2",
    ):
        choose(
            [x for x in preds if x.p == 2 and x.strategy in ("a2a", "halo")]
            + [predict("ag", 2, GRAPH, MODEL, _profile(max_ranks=1))]
        )


def test_switch_needs_twenty_percent():
    profile = _profile()
    preds = predict_all(GRAPH, MODEL, profile, 2, strategies=("ag", "a2a"))
    ag, a2a = (next(x for x in preds if x.p == 2 and x.strategy == s) for s in ("ag", "a2a"))
    fast, slow = (ag, a2a) if ag.time_s < a2a.time_s else (a2a, ag)
    gain = 1 - fast.time_s / slow.time_s
    assert switch_target(fast.strategy, preds, 2) is None
    expected = fast.strategy if gain >= 0.2 else None
    assert getattr(switch_target(slow.strategy, preds, 2), "strategy", None) == expected
    assert switch_target(slow.strategy, preds, 2, gain=0.0).strategy == fast.strategy


def test_calibration_scales_one_strategys_comm_and_adds_overhead():
    profile = _profile()
    base = {s: predict(s, 2, GRAPH, MODEL, profile) for s in ("ag", "a2a")}
    cal = Calibration(comm_scale={"ag": 3.0}, overhead_s=0.5)
    got = {s: predict(s, 2, GRAPH, MODEL, profile, calibration=cal) for s in ("ag", "a2a")}
    assert got["ag"].comm_s == pytest.approx(3 * base["ag"].comm_s)
    assert got["ag"].time_s == pytest.approx(base["ag"].time_s + 2 * base["ag"].comm_s + 0.5)
    assert got["a2a"].time_s == pytest.approx(base["a2a"].time_s + 0.5)


def test_scaling_test_is_the_papers_inequality():
    profile = _profile()
    t = scaling_test("ag", 1, 2, GRAPH, MODEL, profile)
    one = predict("ag", 1, GRAPH, MODEL, profile, step=False)
    two = predict("ag", 2, GRAPH, MODEL, profile, step=False)
    n = GRAPH.num_nodes
    assert t.k == pytest.approx(one.time_s / n)
    assert t.lhs == pytest.approx(2 * (two.comm_s / n - 0.0) / 1)
    assert t.pays_off == (t.lhs <= t.k)
    expensive = _profile(per_byte={c: 1e-5 for c in PER_BYTE})
    assert not scaling_test("ag", 1, 2, GRAPH, MODEL, expensive).pays_off
    with pytest.raises(ValueError, match="s >= 2"):
        scaling_test("ag", 1, 1, GRAPH, MODEL, profile)
    assert math.isfinite(t.lhs)


def test_checkpointing_trades_memory_for_recomputed_forwards():
    """A checkpointed block keeps 2 rows (nested: 1) instead of its sublayers' activations, and runs
    its forward collectives again (nested: its attention's twice more)."""
    profile = _profile()
    n, d, b, L = 25_000, 128, 4, 2
    runs = {
        name: predict("ag", 4, GRAPH, dataclasses.replace(MODEL, **kw), profile, step=False)
        for name, kw in {
            "plain": {},
            "sub": dict(checkpoint_every=1),
            "nested": dict(checkpoint_every=1, checkpoint_nested=True),
        }.items()
    }
    forward_bytes = n * 2 * d * b * 3  # GP-AG's K/V all-gather of one layer
    assert runs["sub"].comm_bytes == pytest.approx(runs["plain"].comm_bytes + L * forward_bytes)
    assert runs["nested"].comm_bytes == pytest.approx(runs["plain"].comm_bytes + 2 * L * forward_bytes)
    assert runs["plain"].time_s < runs["sub"].time_s < runs["nested"].time_s
    row = n * d * b
    attention = attention_sublayer_units(b) * row + get_strategy("ag").cost(4, GRAPH, MODEL, b).activation_bytes
    ffn = ffn_sublayer_units(MODEL.ffn_mult, b) * row
    kept = {
        "plain": L * (attention + ffn),
        "sub": 2 * L * row + max(attention, ffn),
        "nested": L * row + max(attention, ffn + row),
    }
    for name in ("sub", "nested"):
        assert runs["plain"].memory_bytes - runs[name].memory_bytes == pytest.approx(kept["plain"] - kept[name])
    assert runs["nested"].memory_bytes < runs["sub"].memory_bytes < runs["plain"].memory_bytes


def test_gat_shaped_model_counts_its_output_layer_at_its_own_width():
    """The default model (options.py): GAT-shaped blocks (q, k, v, no W_o or FFN) and an output layer
    that attends with H x pad(C) values, so its K/V rows are that wide on the wire and in memory."""
    gat = ModelShape(
        layers=3, hidden=128, heads=8, num_classes=47, block="attention", head="attention", input_projection=False
    )
    hidden, out = gat.layer_kinds()
    assert (hidden.count, hidden.ffn, hidden.macs_per_node, hidden.shape.hidden) == (2, False, 3 * 128 * 128, 128)
    assert (out.count, out.ffn, out.shape.hidden, out.shape.head_dim) == (
        1,
        False,
        8 * 64,
        64,
    )  # 47 classes padded to 64
    profile = _profile()
    n, b = 25_000, 4
    ag = predict("ag", 4, GRAPH, gat, profile, step=False)
    assert ag.comm_bytes == pytest.approx(2 * 2 * (n * 2 * 128 * b) * 3 + 2 * (n * 2 * 512 * b) * 3)
    transformer = predict(
        "ag", 4, GRAPH, dataclasses.replace(gat, block="transformer", head="linear"), profile, step=False
    )
    assert transformer.comm_bytes == pytest.approx(3 * 2 * (n * 2 * 128 * b) * 3)
    with pytest.raises(ValueError, match="an attention head needs num_classes"):
        ModelShape(layers=2, hidden=128, heads=8, head="attention")


def test_checkpointing_counts_the_output_layer_as_a_block():
    """checkpoint_blocks picks blocks 0, k, 2k, ... of all attention layers, the output layer included."""
    gat = ModelShape(layers=3, hidden=128, heads=8, num_classes=7, block="attention", head="attention")
    for every, want in ((1, [2, 1]), (2, [1, 1]), (3, [1, 0])):
        assert [k.checkpointed for k in dataclasses.replace(gat, checkpoint_every=every).layer_kinds()] == want


def test_regathered_kv_trades_the_replica_for_one_more_all_gather():
    profile = _profile()
    n, n_all, d, b, L = 25_000, 100_000, 128, 4, 2
    kept = predict("ag", 4, GRAPH, MODEL, profile, step=False)
    regathered = dataclasses.replace(MODEL, parallel=ParallelConfig(regather_kv=True))
    again = predict("ag", 4, GRAPH, regathered, profile, step=False)
    assert again.comm_bytes == pytest.approx(kept.comm_bytes + L * (n * 2 * d * b) * 3)
    assert kept.memory_bytes - again.memory_bytes == pytest.approx(L * n_all * 2 * d * b)
    assert again.comm_s > kept.comm_s


def test_global_attention_adds_its_all_reduces_projections_and_activations():
    """Global attention costs every strategy the same: per hidden layer one all-reduce of the fp32 sums
    S [H, D, D] and z [H, D] forward, one backward, and one more when backward recomputes the branch
    (checkpointing, selective recomputation) (timed as a
    ring: a reduce-scatter and an all-gather of 1/P each), its four projections with the rest, its
    activations; the parameter count is the real model's."""
    from dsgraph.agp.model import global_sublayer_units
    from dsgraph.comm.allreduce import all_reduce_bytes
    from dsgraph.models import GraphTransformer, ModelOptions
    from dsgraph.parallel.shapes import GlobalAttentionCost

    profile = _profile()
    n, d, b, L, H, D, p = 25_000, 128, 4, 2, 8, 16, 4
    glob = dataclasses.replace(MODEL, global_attention="linear")
    payload = 4 * (H * D * D + H * D)
    g = GlobalAttentionCost.of(p, glob)
    assert g.payload_bytes == payload and g.forward_bytes == all_reduce_bytes(payload, p) == 2 * 3 * payload // 4
    assert g.bytes_sent == 2 * g.forward_bytes
    assert GlobalAttentionCost.of(1, glob).bytes_sent == 0 and GlobalAttentionCost.of(1, glob).messages == ()
    for strategy in ("ag", "a2a", "ag_ring"):
        plain, with_global = (predict(strategy, p, GRAPH, m, profile, step=False) for m in (MODEL, glob))
        assert with_global.comm_bytes - plain.comm_bytes == pytest.approx(L * 2 * all_reduce_bytes(payload, p))
        fits = profile.fits(p).collectives
        all_reduces = (
            L * 2 * (fits["reduce_scatter"](payload / p) + fits["all_gather"](payload / p))
        )  # forward and backward
        assert with_global.comm_s - plain.comm_s == pytest.approx(all_reduces, rel=1e-6), strategy
        extra = with_global.memory_terms["activations"] - plain.memory_terms["activations"]
        assert extra == pytest.approx(L * n * d * b * global_sublayer_units(b))
        assert with_global.rest_s > plain.rest_s  # its projections
    sub = dataclasses.replace(glob, checkpoint_every=1)
    assert predict("ag", p, GRAPH, sub, profile, step=False).comm_bytes - predict(
        "ag", p, GRAPH, dataclasses.replace(MODEL, checkpoint_every=1), profile, step=False
    ).comm_bytes == pytest.approx(
        L * 3 * all_reduce_bytes(payload, p)
    )  # the block's recompute runs the forward all-reduce again
    selective = [dataclasses.replace(m, selective=True) for m in (glob, MODEL)]
    assert predict("ag", p, GRAPH, selective[0], profile, step=False).comm_bytes - predict(
        "ag", p, GRAPH, selective[1], profile, step=False
    ).comm_bytes == pytest.approx(L * 3 * all_reduce_bytes(payload, p))  # so does selective recomputation
    for block, head, layers in (("transformer", "linear", 2), ("attention", "attention", 3)):  # what the branch adds
        counts = []
        for kind in ("none", "linear"):
            options = ModelOptions(block=block, head=head, input_projection=True, global_attention=kind)
            model = GraphTransformer(100, 7, hidden=d, heads=H, layers=layers, ffn_mult=2, options=options)
            shape = ModelShape(
                layers=layers,
                hidden=d,
                heads=H,
                in_dim=100,
                num_classes=7,
                block=block,
                head=head,
                input_projection=True,
                global_attention=kind,
            )
            counts.append((shape.num_params, sum(t.numel() for t in model.parameters())))
        assert (
            counts[1][0] - counts[0][0]
            == counts[1][1] - counts[0][1]
            == (layers - (head == "attention")) * (4 * d * d + 4 * d)
        )
    hidden_kind = glob.layer_kinds()[0]
    assert hidden_kind.global_attention and hidden_kind.global_macs_per_node == 4 * d * d + 2 * d * (D + 1)


def test_gcn_and_sage_layers_cost_their_projections_and_the_same_edge_work():
    """Block kinds with constant scores: one (gcn) or two (sage) d x d projections per node instead of
    QKV's three; the attention work and bytes are the attention layer's (they run its kernels)."""
    shape = GraphShape(1000, 20000)
    kinds = {
        b: ModelShape(layers=3, hidden=64, heads=4, block=b, head="attention", num_classes=5)
        for b in ("attention", "gcn", "sage")
    }
    macs = {b: [k.macs_per_node for k in m.layer_kinds()] for b, m in kinds.items()}
    assert macs["gcn"] == [64 * 64, 64 * 5] and macs["sage"] == [2 * 64 * 64, 2 * 64 * 5]
    assert macs["attention"][0] == 3 * 64 * 64
    terms = {b: get_strategy("ag").cost(2, shape, m, 4) for b, m in kinds.items()}
    assert terms["gcn"].edge_heads == terms["attention"].edge_heads
    assert terms["gcn"].bytes_sent == terms["attention"].bytes_sent


def test_one_rank_keeps_no_kv_replica_and_one_gradient_pair():
    """At p = 1 GP-AG's gather hands back K and V themselves and GP-Halo has nothing to exchange, so
    neither keeps a K/V copy for backward, and the backward buffer is one dK/dV pair of the N rows;
    at p = 2 GP-AG keeps the gathered replica and its backward holds the pair twice (the gathered
    gradient and what it reduce-scatters), GP-Halo its own rows with the halo and two pairs of them."""
    import torch

    from dsgraph.comm import GraphParallelGroup, gather_rows_padded
    from dsgraph.parallel.shapes import GraphShape

    x = torch.ones(10, 2, 4)
    assert gather_rows_padded(x, GraphParallelGroup.single(10)) is x
    shape, b = GraphShape.from_counts(100_000, 2_000_000, [1, 2], 0.1), 2
    pair = 100_000 * 2 * MODEL.hidden * b
    scores = 100_000 * MODEL.heads * 4  # lse, fp32, per row and head
    for name in ("ag", "halo"):
        one = get_strategy(name).cost(1, shape, MODEL, b)
        assert (one.kv_replica_bytes, one.halo_bytes, one.transient_bytes) == (0, 0, pair), name
        assert one.activation_bytes == scores, name
    ag, halo = get_strategy("ag").cost(2, shape, MODEL, b), get_strategy("halo").cost(2, shape, MODEL, b)
    assert ag.kv_replica_bytes == pair and ag.transient_bytes == 2 * pair
    remote = (50_000 + 5_000) * 2 * MODEL.hidden * b  # own rows and the halo
    assert halo.activation_bytes == remote + scores / 2 and halo.transient_bytes == 2 * remote


def test_propagation_adds_k_weightless_gcn_layers_of_the_class_width():
    """APPNP's K steps (``model.propagation_steps``): K 'gcn' layers H x pad(ceil(C / H)) wide after
    the output layer, never checkpointed, with no parameters; their bytes and activations add to the
    model's; they add no parameters."""
    gat = ModelShape(layers=2, hidden=64, heads=8, in_dim=30, num_classes=7, block="attention", head="attention")
    appnp = dataclasses.replace(gat, propagation_steps=10, checkpoint_every=1)
    *_, prop = appnp.layer_kinds()
    assert (prop.count, prop.checkpointed, prop.weights, prop.shape.hidden, prop.shape.head_dim) == (
        10,
        0,
        False,
        64,
        8,
    )
    assert (prop.shape.block, prop.shape.global_attention, prop.macs_per_node) == ("gcn", "none", 2 * 64)
    assert appnp.num_params == gat.num_params
    profile, shape = _profile(), GraphShape(1000, 20000)
    plain, more = (
        predict("ag", 2, shape, m, profile, step=False) for m in (gat, dataclasses.replace(gat, propagation_steps=10))
    )
    one = get_strategy("ag").cost(2, shape, prop.shape, 4)
    assert more.comm_bytes == pytest.approx(plain.comm_bytes + 10 * one.bytes_sent)
    assert more.memory_bytes > plain.memory_bytes
    with pytest.raises(ValueError, match="propagation needs num_classes"):
        ModelShape(layers=2, hidden=64, heads=8, propagation_steps=2)
