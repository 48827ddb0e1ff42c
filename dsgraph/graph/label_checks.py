"""Labels and split masks checked for the task before anything trains on them.

- Class labels must be integers: a float ``y`` [N] holding non-integer values (0.5, 1.5) is refused
  rather than cast (a continuous target is for task 'regression'). A float ``y`` [N, T] is a multi-label
  target: 0/1 per (node, label), -1 or NaN for a missing label.
- A continuous target (``SplitChoice.continuous``, task 'regression') is numeric [N] or [N, T], kept
  as float32; every node in train/val/test must have finite values (``check_targets``).
- Masks [S, N] hold S fixed splits; ``split`` picks one (0-based), [N] masks are split 0.
- A node in two of train/val/test is refused (the counts are in the message) unless the run allows
  overlapping splits.
- The class count is the largest class id + 1, unless the config declares ``num_classes``; a label
  far outside the others (one node of class 99 among classes 0-5 would make a 100-class problem
  with 93 classes empty) is refused unless declared (``class_count``).

Every message names the file and the array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class SplitChoice:
    """Which of a file's fixed splits a run uses, whether its sets may overlap, and how it reads 'y'."""

    split: int = 0
    allow_overlap: bool = False
    continuous: bool = False
    """'y' is a continuous target (task 'regression'): float [N] or [N, T], not class ids."""
    num_classes: int | None = None
    """The class count the config declares (None: the largest class id + 1, checked by ``class_count``)."""


def select_split(path: str, name: str, mask: np.ndarray, num_nodes: int, split: int) -> np.ndarray:
    """Split ``split`` of a mask [N] or [S, N] (a view of a memory map stays one)."""
    if mask.ndim == 1:
        if split != 0:
            raise ValueError(
                f"{path}: array '{name}' holds one split ([N]); 'split' {split} needs masks of shape [S, N]"
            )
        chosen = mask
    elif mask.ndim == 2:
        if not 0 <= split < mask.shape[0]:
            raise ValueError(
                f"{path}: array '{name}' holds {mask.shape[0]} splits ([S, N] = {list(mask.shape)}); "
                f"'split' must be in 0..{mask.shape[0] - 1}, got {split}"
            )
        chosen = mask[split]
    else:
        raise ValueError(f"{path}: array '{name}' must be [N] or [S, N], got shape {mask.shape}")
    if chosen.shape[0] != num_nodes:
        raise ValueError(f"{path}: array '{name}' has {chosen.shape[0]} rows but the graph has {num_nodes} nodes")
    if not (chosen.dtype == np.bool_ or np.issubdtype(chosen.dtype, np.integer)):
        raise ValueError(f"{path}: array '{name}' must be boolean (or 0/1 integers), got {chosen.dtype}")
    return chosen


def num_splits(mask: np.ndarray) -> int:
    return int(mask.shape[0]) if mask.ndim == 2 else 1


def check_overlap(path: str, masks: dict[str, np.ndarray], names: dict[str, str], allow: bool) -> None:
    """Refuses nodes in two of train/val/test (with the counts), unless ``allow``."""
    if allow:
        return
    pairs = (("train_mask", "val_mask"), ("train_mask", "test_mask"), ("val_mask", "test_mask"))
    counts = {(a, b): int(np.count_nonzero(np.asarray(masks[a], bool) & np.asarray(masks[b], bool))) for a, b in pairs}
    bad = [f"{names[a]} & {names[b]}: {n:,} node(s)" for (a, b), n in counts.items() if n]
    if bad:
        sizes = ", ".join(f"{names[k]} {int(np.count_nonzero(masks[k])):,}" for k in masks)
        raise ValueError(
            f"{path}: train/val/test overlap ({'; '.join(bad)}; sizes {sizes}); fix the masks, or set "
            '"allow_overlapping_splits": true if the overlap is intended'
        )


def check_labels(path: str, name: str, y: np.ndarray, continuous: bool = False) -> bool:
    """Checks the labels array; returns whether it is a multi-label target ([N, T] float).
    ``continuous``: a regression target, numeric [N] or [N, T] (never multi-label)."""
    if continuous:
        if y.ndim not in (1, 2) or not np.issubdtype(y.dtype, np.number):
            raise ValueError(
                f"{path}: the regression target '{name}' must be numeric [N] or [N, T], got {y.dtype} of shape "
                f"{y.shape}"
            )
        return False
    if y.ndim == 2:
        if not np.issubdtype(y.dtype, np.number) and y.dtype != np.bool_:
            raise ValueError(f"{path}: multi-label array '{name}' must be numeric, got {y.dtype}")
        values = np.asarray(y, dtype=np.float64)
        ok = np.isnan(values) | np.isin(values, (0.0, 1.0, -1.0))
        if not ok.all():
            node, label = (int(i[0]) for i in np.nonzero(~ok))
            raise ValueError(
                f"{path}: multi-label array '{name}' [N, T] must hold 0 or 1 (-1 or NaN: missing); "
                f"node {node}, label {label} holds {values[node, label]} (a continuous target trains "
                'with "task": "regression")'
            )
        return True
    if y.ndim != 1:
        raise ValueError(f"{path}: labels '{name}' must be [N] class ids or [N, T] multi-label, got shape {y.shape}")
    if np.issubdtype(y.dtype, np.floating):
        values = np.asarray(y)
        bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)))
        if bad.size:
            raise ValueError(
                f"{path}: labels '{name}' are {y.dtype} and node {int(bad[0])} holds {values[bad[0]]}, which is "
                "not a class id; class labels must be integers (a continuous target trains with "
                '"task": "regression")'
            )
    elif not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{path}: labels '{name}' must be integer class ids, got {y.dtype}")
    return False


def check_targets(path: str, name: str, y: np.ndarray, masks: dict[str, np.ndarray]) -> None:
    """A continuous target must be finite at every node of train/val/test (NaN elsewhere is fine)."""
    for mask_name, mask in masks.items():
        values = np.asarray(y[np.asarray(mask, bool)], dtype=np.float64)
        bad = ~np.isfinite(values.reshape(values.shape[0], -1)).all(axis=1)
        if bad.any():
            node = int(np.flatnonzero(np.asarray(mask, bool))[np.flatnonzero(bad)[0]])
            raise ValueError(
                f"{path}: the regression target '{name}' is NaN or Inf at node {node}, which is in "
                f"'{mask_name}'; every node of train/val/test needs a finite target"
            )


def class_count(path: str, name: str, y: np.ndarray, declared: int | None) -> int:
    """The class count of class ids ``y`` [N] (-1: unlabelled): ``declared`` (every label below it),
    or the largest label + 1, refused when more of the classes 0..largest would be empty than not (a
    label far outside the others, a typo or a sentinel, would otherwise silently widen the task)."""
    labels = np.asarray(y).astype(np.int64)
    labelled = labels[labels >= 0]
    if labelled.size == 0:
        return declared or 0
    top = int(labelled.max())
    node = int(np.flatnonzero(labels == top)[0])
    if declared is not None:
        if top >= declared:
            raise ValueError(f"{path}: labels '{name}' hold label {top} (node {node}) but 'num_classes' is {declared}")
        return declared
    used = np.unique(labelled)
    empty = top + 1 - used.size
    if empty > used.size:
        below = f"0..{int(used[-2])}" if used.size > 1 else "none"
        raise ValueError(
            f"{path}: labels '{name}': node {node} has label {top}, far outside the other classes ({below}); "
            f'{top + 1} classes would leave {empty} of them without a node. Set "num_classes": {top + 1} in the '
            "config if the run really has that many classes, or fix the labels"
        )
    return top + 1
