"""What a run learns: node classification, link prediction, node regression (``registry.py``)."""

from dsgraph.tasks.registry import TASKS, get_task, task_names

__all__ = ["TASKS", "get_task", "task_names"]
