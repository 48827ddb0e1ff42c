"""The model of a checkpoint on this run's ranks: one full-graph forward, its metrics, its outputs."""

from __future__ import annotations

import numpy as np
import torch

from dsgraph.comm import GraphParallelGroup
from dsgraph.comm.control import make_control_plane
from dsgraph.modes.full.mode import FullGraph
from dsgraph.train import prediction_files
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.evaluation import evaluate_splits
from dsgraph.train.link_evaluation import evaluate_links
from dsgraph.train.task import Task
from dsgraph.train.weights import load_module_weights

MASKS = ("train_mask", "val_mask", "test_mask")


class Inference:
    def __init__(self, cfg: DsgraphConfig, device: torch.device, checkpoint_dir: str, tag: str | None, bf16: bool = False, log=print):
        from dsgraph.train.trainer import build_model

        self.cfg, self.device = cfg, device
        pg = GraphParallelGroup.from_world()
        rank_log = log if pg.rank == 0 else (lambda line: None)
        self.control = make_control_plane(rank_log if pg.rank == 0 else None)
        state, self.client, self.tag = load_module_weights(checkpoint_dir, tag)
        self.mode = FullGraph(cfg, pg, self.control, rank_log, lambda phase: None)
        self.pg = self.mode.pg
        self.link = self.mode.link  # a link task's data, else None
        self.task = Task.link() if self.link is not None else Task.of(self.mode.num_classes, multilabel=self.mode.multilabel)
        dtype = torch.bfloat16 if bf16 else torch.float32
        self.model = build_model(cfg, self.mode.num_features, self.mode.num_classes, self.mode.encoding_widths,
                                 self.mode.num_edge_features)  # fmt: skip
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"{checkpoint_dir}/{self.tag}: the checkpoint does not fit this config's model "
                             f"(missing {missing[:5]}, unexpected {unexpected[:5]})")  # fmt: skip
        self.model = self.model.to(device=device, dtype=dtype).eval()
        self.mode.attach(device, dtype)
        rank_log(f"checkpoint {checkpoint_dir}/{self.tag} (epoch {self.client.get('epoch')}) on {self.pg.world_size} rank(s), "
                 f"strategy {self.mode.strategy_label}")  # fmt: skip

    @torch.no_grad()
    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, embeddings) of this rank's rows, float32; a link task's are both its embeddings."""
        batch = self.mode.eval_batch()
        if self.link is not None:
            z = self.model(batch.x, batch.attention, batch.node_ids, 0, batch.enc)
            return z.float(), z.float()
        logits, emb = self.model.embed(batch.x, batch.attention, batch.node_ids, 0, batch.enc)
        return logits.float(), emb.float()

    def metrics(self) -> dict:
        import deepspeed.comm as dist

        from dsgraph.train.trainer import link_hits

        batch = self.mode.eval_batch()
        metric = self.task.metric(self.cfg.metric)
        if self.link is not None:
            with torch.no_grad():
                scores = self.model(batch.x, batch.attention, batch.node_ids, 0, batch.enc, batch.pairs).float()
            values = evaluate_links(scores, batch.pair_sets, link_hits(self.cfg, metric))
        else:
            logits, _ = self.forward()
            all_reduce = (lambda t: dist.all_reduce(t)) if self.pg.world_size > 1 else (lambda t: None)
            values = evaluate_splits(self.task, metric, logits, batch.y, batch.masks, True, all_reduce)
        return {"checkpoint": self.tag, "epoch": self.client.get("epoch"), "metric": metric, **values}

    @torch.no_grad()
    def write(self, out: str, edges: np.ndarray | None = None) -> str:
        """Writes ``out`` (every rank its own rows); returns what it holds. ``edges`` [m, 2] (a link
        task's): pairs of dataset ids whose scores to write too."""
        import deepspeed.comm as dist

        if self.link is not None:
            return self._write_link(out, edges)
        logits, emb = self.forward()
        nodes = self.mode.ranks.graph.nodes
        n = self.mode.ranks.graph.num_nodes
        shapes = {"logits": ((n, logits.shape[1]), "float32"), "embeddings": ((n, emb.shape[1]), "float32"),
                  **{m: ((n,), "bool") for m in MASKS}}  # fmt: skip
        if self.pg.rank == 0:
            prediction_files.allocate(out, shapes)
        if self.pg.world_size > 1:
            dist.barrier()
        rows = nodes.node_ids.cpu().numpy()
        arrays = {"logits": logits.cpu().numpy(), "embeddings": emb.cpu().numpy(),
                  **{m: getattr(nodes, m).cpu().numpy() for m in MASKS}}  # fmt: skip
        prediction_files.write_rows(out, rows, arrays)
        if self.pg.world_size > 1:
            dist.barrier()
        if self.pg.rank == 0:
            prediction_files.merge(out, list(shapes))
        return f"logits [{n}, {logits.shape[1]}], embeddings [{n}, {emb.shape[1]}], masks [{n}]"

    def _write_link(self, out: str, edges: np.ndarray | None) -> str:
        """A link task's ``embeddings`` [N, d], and with ``edges`` the pairs and their ``scores`` [m]
        (logits; sigmoid gives the probability), each rank scoring the pairs whose first node it owns."""
        import deepspeed.comm as dist

        batch = self.mode.eval_batch()
        z = self.model(batch.x, batch.attention, batch.node_ids, 0, batch.enc)
        n = self.mode.ranks.graph.num_nodes
        shapes = {"embeddings": ((n, z.shape[1]), "float32")}
        if edges is not None:
            if edges.size and (edges.min() < 0 or edges.max() >= n):
                raise ValueError(f"--edges names a node outside [0, {n}) (pairs are dataset node ids)")
            shapes.update(edges=((edges.shape[0], 2), "int64"), scores=((edges.shape[0],), "float32"))
        if self.pg.rank == 0:
            prediction_files.allocate(out, shapes)
        if self.pg.world_size > 1:
            dist.barrier()
        prediction_files.write_rows(out, self.mode.ranks.graph.nodes.node_ids.cpu().numpy(), {"embeddings": z.float().cpu().numpy()})
        if edges is not None:
            pairs, index = self.link.pairs_of(edges)
            scores = self.model.score(z, pairs).float().cpu().numpy()
            prediction_files.write_rows(out, index, {"edges": edges[index], "scores": scores})
        if self.pg.world_size > 1:
            dist.barrier()
        if self.pg.rank == 0:
            prediction_files.merge(out, list(shapes))
        described = f"embeddings [{n}, {z.shape[1]}]"
        return described + (f", edges [{edges.shape[0]}, 2], scores [{edges.shape[0]}]" if edges is not None else "")
