"""The model of a checkpoint on this run's ranks: one full-graph forward, its metrics, its outputs."""

from __future__ import annotations

import numpy as np
import torch

from dsgraph.comm import GraphParallelGroup
from dsgraph.comm.control import make_control_plane
from dsgraph.modes.full.mode import FullGraph
from dsgraph.tasks import get_task
from dsgraph.train import prediction_files
from dsgraph.train.config import DsgraphConfig
from dsgraph.train.weights import load_module_weights


class Inference:
    def __init__(
        self,
        cfg: DsgraphConfig,
        device: torch.device,
        checkpoint_dir: str,
        tag: str | None,
        bf16: bool = False,
        log=print,
    ):
        self.cfg, self.device = cfg, device
        pg = GraphParallelGroup.from_world()
        rank_log = log if pg.rank == 0 else (lambda line: None)
        self.control = make_control_plane(rank_log if pg.rank == 0 else None)
        state, self.client, self.tag = load_module_weights(checkpoint_dir, tag)
        self.task = get_task(cfg.task)(cfg)
        self.mode = FullGraph(cfg, pg, self.control, rank_log, lambda phase: None, self.task)
        self.pg = self.mode.pg
        self.task.set_data(self.mode.num_classes, self.mode.multilabel)
        dtype = torch.bfloat16 if bf16 else torch.float32
        self.model = self.task.build_model(
            self.mode.num_features, self.mode.num_classes, self.mode.encoding_widths, self.mode.num_edge_features
        )
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(
                f"{checkpoint_dir}/{self.tag}: the checkpoint does not fit this config's model "
                f"(missing {missing[:5]}, unexpected {unexpected[:5]})"
            )
        self.model = self.model.to(device=device, dtype=dtype).eval()
        self.mode.attach(device, dtype)
        rank_log(
            f"checkpoint {checkpoint_dir}/{self.tag} (epoch {self.client.get('epoch')}) on {self.pg.world_size} "
            "rank(s), "
            f"strategy {self.mode.strategy_label}"
        )

    @torch.no_grad()
    def metrics(self) -> dict:
        import deepspeed.comm as dist

        batch = self.mode.eval_batch()
        metric = self.task.metric(self.cfg.metric)
        outputs = self.task.outputs(self.model, batch, 0)
        all_reduce = (lambda t: dist.all_reduce(t)) if self.pg.world_size > 1 else (lambda t: None)
        values = self.task.evaluate(outputs, batch, metric, all_reduce)
        return {"checkpoint": self.tag, "epoch": self.client.get("epoch"), "metric": metric, **values}

    @torch.no_grad()
    def write(self, out: str, pairs: np.ndarray | None = None) -> str:
        """Writes ``out`` (every rank its own rows, ``Task.export``); returns what it holds.
        ``pairs`` [m, 2] (a task that scores pairs): dataset ids whose scores to write too."""
        import deepspeed.comm as dist

        export = self.task.export(self.model, self.mode.eval_batch(), self.mode.data, pairs)
        if self.pg.rank == 0:
            prediction_files.allocate(out, export.shapes)
        if self.pg.world_size > 1:
            dist.barrier()
        for rows, arrays in export.parts:
            prediction_files.write_rows(out, rows, arrays)
        if self.pg.world_size > 1:
            dist.barrier()
        if self.pg.rank == 0:
            prediction_files.merge(out, list(export.shapes))
        return export.described
