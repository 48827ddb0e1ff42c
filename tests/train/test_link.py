"""Link prediction over ranks: 1, 2 and 4 gloo ranks take the same steps (losses and evaluation to
1e-5, fp32, dropout on; the MLP decoder's model also reads the degree encoding) for every strategy;
no held-out edge reaches the encoder on any rank, neither as an edge nor in the degrees; the
exchange of the pairs' rows is counted in comm_bytes; a checkpoint scores an edge list at any
world size."""

import numpy as np
import pytest
import torch

from dsgraph.graph.link_split import pair_keys
from dsgraph.graph.rank_graph import RankGraph
from dsgraph.models import GAT
from dsgraph.train.config import DsgraphConfig
from tests.distributed import run
from tests.train.helpers import ds_config, dump, load, make_trainer, write_random_graph

STRATEGIES = ("ag", "a2a", "halo", "ag_ring")
LINK = dict(
    task="link",
    epochs=3,
    eval_every=1,
    self_loops=True,
    dropout=0.2,
    input_dropout=0.1,
    attention_dropout=0.1,
    link=dict(embedding_dim=16, negatives=2, val_fraction=0.1, test_fraction=0.1, hits_at=[5, 20]),
)


def _train(rank, world, tmp, decoder):
    out = {}
    for strategy in STRATEGIES if world > 1 else ("ag",):
        model = (
            {**GAT.to_dict(), "encodings": ["degree"]} if decoder == "mlp" else GAT.to_dict()
        )  # the shape these steps were sized for
        trainer = make_trainer(
            tmp,
            ds_config(stage=2),
            strategy=strategy,
            model=model,
            **{**LINK, "link": {**LINK["link"], "decoder": decoder}},
        )
        before = trainer.evaluate(-1)
        rows = [trainer.train_epoch(epoch) for epoch in range(3)]
        out[strategy] = {
            "loss": [r["loss"] for r in rows],
            "acc": [r["train_acc"] for r in rows],
            "bytes": [r["comm_bytes"] for r in rows],
            "before": before,
            "after": trainer.evaluate(2),
        }
    if rank == 0:
        dump(tmp, f"link{world}_{decoder}.json", out)


@pytest.mark.slow
@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_one_two_and_four_ranks_take_the_same_link_steps(tmp_path, decoder):
    write_random_graph(str(tmp_path))
    for world in (1, 2, 4):
        run(_train, world, tmp_path, decoder)
    one = load(tmp_path, f"link1_{decoder}.json")["ag"]
    assert one["after"]["metric"] == "rocauc"
    assert one["loss"][2] < one["loss"][0], one["loss"]
    if decoder == "dot":
        assert one["after"]["train_rocauc"] > one["before"]["train_rocauc"]
    columns = [
        k for k in one["after"] if k.startswith(("train_", "val_", "test_")) and "best" not in k and "at_best" not in k
    ]
    assert {"val_rocauc", "val_ap", "val_mrr", "val_hits@5", "val_hits@20", "test_acc"} <= set(columns)
    for world in (2, 4):
        for strategy, got in load(tmp_path, f"link{world}_{decoder}.json").items():
            assert np.allclose(got["loss"], one["loss"], atol=1e-5, rtol=0), (world, strategy, got["loss"], one["loss"])
            assert np.allclose(got["acc"], one["acc"], atol=1e-9), (world, strategy)
            assert all(b > 0 for b in got["bytes"]), (world, strategy)
            for key in ["loss", *columns]:
                assert np.isclose(got["after"][key], one["after"][key], atol=1e-5), (world, strategy, key)


def _held_out_keys(trainer) -> tuple[np.ndarray, int]:
    split = trainer.mode.data.split
    n = split.num_nodes
    return np.concatenate([pair_keys(split.positives[s], n) for s in ("val", "test")]), n


def _encoder_pairs(graph: RankGraph, perm: np.ndarray, start: int) -> list[np.ndarray]:
    """Every (dst, src) pair of dataset ids that this rank's structures hand the encoder."""
    out = []
    for csr, first in ((graph.block, start), (graph.whole, 0)):
        if csr is None:
            continue
        rows = np.repeat(np.arange(csr.num_rows), np.diff(csr.rowptr.numpy())) + first
        out.append(np.stack([perm[rows], perm[csr.col.numpy().astype(np.int64)]], axis=1))
    return out


def _leakage(rank, world, tmp):
    found = {}
    for strategy in STRATEGIES:
        trainer = make_trainer(tmp, ds_config(stage=2), strategy=strategy, model={"encodings": ["degree"]}, **LINK)
        graph = trainer.mode.ranks.graph
        perm = np.argsort(trainer.mode.data.row_of)  # global row -> dataset id
        held, n = _held_out_keys(trainer)
        assert held.size > 10
        seen = np.concatenate([pair_keys(p, n) for p in _encoder_pairs(graph, perm, trainer.pg.rows[0])])
        train_pairs = trainer.mode.data.split.positives["train"]
        train = pair_keys(train_pairs, n)
        degree = np.bincount(
            train_pairs.reshape(-1), minlength=n
        )  # an undirected training edge: in and out of both ends
        found[strategy] = {
            "leaked": int(np.isin(held, seen).sum()),
            "train_seen": int(np.isin(train, seen).sum()),
            "rows": trainer.pg.counts,
            "degree_ok": bool((graph.nodes.enc["degree"].numpy() == degree[graph.nodes.node_ids.numpy(), None]).all()),
        }
    dump(tmp, f"leak{world}_{rank}.json", found)


@pytest.mark.slow
def test_no_held_out_edge_reaches_the_encoder_on_any_rank(tmp_path):
    """Both directions of every val and test edge are absent from each rank's CSR block (and from
    the whole structure a2a keeps), for every strategy's split (halo relabels by METIS)."""
    write_random_graph(str(tmp_path))
    for world in (1, 2, 4):
        run(_leakage, world, tmp_path)
        for rank in range(world):
            for strategy, got in load(tmp_path, f"leak{world}_{rank}.json").items():
                assert got["leaked"] == 0, (world, rank, strategy)
                assert got["train_seen"] > 0, (world, rank, strategy)
                assert got["degree_ok"], (world, rank, strategy)


def _bytes(rank, world, tmp):
    """The pair exchange alone: rows scored minus rows owned, times d x 4 bytes, forward and backward."""
    import deepspeed.comm as dist

    trainer = make_trainer(tmp, ds_config(stage=2), strategy="ag", **LINK)
    step = next(iter(trainer.mode.steps(0, 1)))
    z = torch.randn(trainer.mode.ranks.graph.nodes.num_rows, 16, requires_grad=True)
    trainer.pg.stats.reset()
    z_u, z_v = step.pairs.fetch(z)
    ((z_u * z_v).sum()).backward()
    plan = step.pairs.plan
    received = sum(plan.recv_counts)
    sent_ids = 8 * received + 8 * (world - 1)  # the ids asked for and the counts
    counted = torch.tensor([trainer.pg.stats.bytes_sent, 2 * 64 * sum(plan.send_counts) + sent_ids], dtype=torch.int64)
    dist.all_reduce(counted)
    if rank == 0:
        dump(tmp, "bytes.json", counted.tolist())


@pytest.mark.slow
def test_pair_exchange_bytes_are_counted(tmp_path):
    write_random_graph(str(tmp_path))
    run(_bytes, 2, tmp_path)
    counted, expected = load(tmp_path, "bytes.json")
    assert counted == expected and counted > 0


def test_link_config_refuses_what_it_cannot_run(tmp_path):
    base = dict(dataset=write_random_graph(str(tmp_path)), task="link")
    with pytest.raises(ValueError, match="mode 'sampled'"):
        DsgraphConfig.from_dict({**base, "mode": "sampled", "sampled": {"fanouts": [2, 2]}})
    with pytest.raises(ValueError, match="mode 'isolated'"):
        DsgraphConfig.from_dict({**base, "mode": "isolated"})
    with pytest.raises(ValueError, match="partition store"):
        DsgraphConfig.from_dict({**base, "strategy": "ag", "partitions": str(tmp_path)})
    with pytest.raises(ValueError, match="hits@K"):
        DsgraphConfig.from_dict({**base, "metric": "accuracy"})
    with pytest.raises(ValueError, match="integer K"):
        DsgraphConfig.from_dict({**base, "metric": "hits@x"})
    with pytest.raises(ValueError, match="'metric' must be one of"):
        DsgraphConfig.from_dict({**base, "task": "node", "metric": "mrr"})
    with pytest.raises(ValueError, match="unknown key"):
        DsgraphConfig.from_dict({**base, "link": {"negative": 2}})
    with pytest.raises(ValueError, match="decoder"):
        DsgraphConfig.from_dict({**base, "link": {"decoder": "bilinear"}})
    with pytest.raises(ValueError, match="held-out ones included"):
        DsgraphConfig.from_dict({**base, "model": {"encodings": ["degree", "rwse"]}})
    assert DsgraphConfig.from_dict({**base, "model": {"encodings": ["degree"]}}).model.encodings == ("degree",)
    assert DsgraphConfig.from_dict({**base, "metric": "hits@50"}).metric == "hits@50"


SAVED = dict(LINK, epochs=3, eval_every=3, checkpoint_every=3, dropout=0.0)


def _edges() -> np.ndarray:
    return np.random.default_rng(3).integers(0, 103, (40, 2))  # random_graph's 103 nodes


def _train_and_score(rank, world, tmp):
    trainer = make_trainer(tmp, ds_config(stage=2), checkpoint_dir=f"{tmp}/ck", **SAVED)
    last = trainer.fit(log=lambda line: None)["last"]
    trainer.engine.eval()
    batch = trainer.mode.eval_batch()
    pairs, index = trainer.mode.data.pairs_of(_edges())
    with torch.no_grad():
        scores = trainer.engine(batch.x, batch.attention, batch.node_ids, 0, batch.enc, pairs).float()
    np.savez(f"{tmp}/ref_rank{rank}.npz", index=index, scores=scores.numpy())
    if rank == 0:
        dump(tmp, "last.json", last)


def _predict(rank, world, tmp, strategy):
    from dsgraph.train.inference import Inference

    cfg = DsgraphConfig.from_dict(
        {
            **SAVED,
            "dataset": write_random_graph(tmp),
            "hidden": 32,
            "heads": 4,
            "seed": 3,
            "self_loops": True,
            "checkpoint_dir": f"{tmp}/ck",
            "strategy": strategy,
        }
    )
    inference = Inference(cfg, torch.device("cpu"), cfg.checkpoint_dir, None, log=lambda line: None)
    inference.write(f"{tmp}/pred{world}_{strategy}.npz", _edges())
    metrics = inference.metrics()
    if rank == 0:
        dump(tmp, f"metrics{world}_{strategy}.json", metrics)


@pytest.mark.slow
def test_a_link_checkpoint_scores_an_edge_list_at_any_world_size(tmp_path):
    run(_train_and_score, 2, tmp_path)
    ref = np.zeros(40, np.float32)
    for r in range(2):
        part = np.load(tmp_path / f"ref_rank{r}.npz")
        ref[part["index"]] = part["scores"]
    last = load(tmp_path, "last.json")
    for world, strategy in ((1, "ag"), (2, "halo"), (4, "a2a")):
        run(_predict, world, tmp_path, strategy)
        with np.load(tmp_path / f"pred{world}_{strategy}.npz") as pred:
            assert np.array_equal(pred["edges"], _edges()) and pred["embeddings"].shape == (103, 16)
            assert np.abs(pred["scores"] - ref).max() <= 1e-5, (world, strategy)
        metrics = load(tmp_path, f"metrics{world}_{strategy}.json")
        for key in ("test_rocauc", "val_ap", "test_mrr", "val_hits@20", "loss"):
            assert abs(metrics[key] - last[key]) <= 1e-5, (world, strategy, key)
