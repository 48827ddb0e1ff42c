"""The task registry: one module per task, each class with its name, section and checks; the
trainer, inference and predict never ask for a task by name."""

import importlib
import pathlib
import re

import pytest

from dsgraph.tasks import TASKS, get_task, task_names
from dsgraph.tasks.base import Task
from dsgraph.train.config import SECTIONS, DsgraphConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_task_is_one_module_with_one_registered_class():
    assert task_names() == ["node", "link", "regression"]
    for name, cls in TASKS.items():
        assert issubclass(cls, Task) and cls.name == name and get_task(name) is cls
        module = importlib.import_module(cls.__module__)
        assert module.__name__ == f"dsgraph.tasks.{name}", "a task lives in dsgraph/tasks/<name>.py"
        assert cls.metrics, f"task '{name}' lists its metrics"
        if cls.section is not None:
            assert SECTIONS[cls.section] is cls.Config and cls.Config.FLAT_KEYS is not None
    with pytest.raises(ValueError, match="'task' must be one of node, link, regression; got 'graph'"):
        get_task("graph")


def test_the_training_paths_never_compare_a_task_name():
    pattern = re.compile(r"task\s*(==|!=)|(==|!=)\s*\"(node|link|regression)\"")
    for path in (
        "dsgraph/train/trainer.py",
        "dsgraph/train/inference.py",
        "dsgraph/train/predict.py",
        "dsgraph/modes/full/mode.py",
    ):
        text = (ROOT / path).read_text()
        assert not pattern.search(text), f"{path} compares a task's name: {pattern.search(text).group(0)}"


def test_config_asks_the_task_class_for_its_metric_and_run():
    assert DsgraphConfig(task="regression").metric is None
    assert DsgraphConfig(task="regression", metric="r2").metric == "r2"
    with pytest.raises(ValueError, match="'metric' of a regression task must be one of mse, mae, r2"):
        DsgraphConfig.from_dict({"task": "regression", "metric": "accuracy"})
    with pytest.raises(ValueError, match="'metric' must be one of accuracy"):
        DsgraphConfig.from_dict({"task": "node", "metric": "mse"})
    with pytest.raises(ValueError, match="'task': 'regression' trains in mode 'full'"):
        DsgraphConfig.from_dict({"task": "regression", "mode": "sampled", "sampled": {"fanouts": [2, 2]}})
    with pytest.raises(ValueError, match="partition store"):
        DsgraphConfig.from_dict({"task": "regression", "partitions": "somewhere"})
    with pytest.raises(ValueError, match="does not read edge features"):
        DsgraphConfig.from_dict({"task": "link", "model": {"edge_features": "bias"}})
    with pytest.raises(ValueError, match="'task' must be one of node, link, regression"):
        DsgraphConfig.from_dict({"task": "graph"})
    assert DsgraphConfig(task="regression").split_choice().continuous
    assert not DsgraphConfig(task="node").split_choice().continuous


def test_model_selection_direction_is_the_tasks():
    regression = get_task("regression")(DsgraphConfig(task="regression"))
    assert regression.default_metric == "mse"
    assert not regression.higher_is_better("mse") and not regression.higher_is_better("mae")
    assert regression.higher_is_better("r2")
    node = get_task("node")(DsgraphConfig())
    assert node.higher_is_better("accuracy")


def test_model_selection_keeps_the_lowest_value_when_lower_is_better():
    from dsgraph.train.trainer import improves, new_best, upgrade_best

    best = new_best("mse", higher_is_better=False)
    assert best["val"] == float("inf") and improves(0.5, best["val"], False) and not improves(0.6, 0.5, False)
    assert not improves(float("nan"), best["val"], False) and not improves(float("nan"), float("-inf"), True)
    assert improves(0.7, 0.6, True) and upgrade_best({"metric": "r2", "val": 0.9}, "mse", False)["val"] == float("inf")
