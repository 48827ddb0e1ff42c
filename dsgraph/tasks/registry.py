"""The tasks, registered once: what a run learns (``base.py`` says what a task is).

A new task is its own module beside these (its ``Task`` subclass: config section, model, batch,
loss, metrics, export) plus one entry in ``TASKS``.
"""

from __future__ import annotations

from dsgraph.tasks.base import Task
from dsgraph.tasks.link import LinkTask
from dsgraph.tasks.node import NodeTask
from dsgraph.tasks.regression import RegressionTask

TASKS = {cls.name: cls for cls in (NodeTask, LinkTask, RegressionTask)}  # the registry: one entry per task


def task_names() -> list[str]:
    return list(TASKS)


def get_task(name: str) -> type[Task]:
    """The task class registered as ``name``; ValueError naming the choices otherwise."""
    if name not in TASKS:
        raise ValueError(f"'task' must be one of {', '.join(TASKS)}; got '{name}'")
    return TASKS[name]
