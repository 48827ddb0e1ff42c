"""Fuzzing the input readers: hundreds of malformed inputs, each refused with the project's named
error (a ValueError or FileNotFoundError whose message names the file), never a traceback from
numpy, torch or numba, a crash or a hang.

Three readers: the dataset ``.npz`` reader (``load_npz``: ``rank_reader.DatasetFile`` and
``label_checks``), the partition store reader (``store.load_part``) and the edge-list converter
(``dsgraph convert``). Each case is built from a valid input by one deterministic change (a missing,
mistyped, misshapen or out-of-range array, NaN/inf features, an empty graph, labels out of range,
overlapping masks, truncated or corrupted bytes, a failed checksum). Random byte flips in the
middle of a file may leave it valid: those must load or be refused by name, nothing else.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import shutil

import numpy as np
import pytest

from dsgraph.graph import convert
from dsgraph.graph.label_checks import SplitChoice
from dsgraph.graph.npz import load_npz
from dsgraph.graph.partition import partition_nodes, relabel
from dsgraph.graph.store import META_FILE, load_part, write_store
from tests.graphs import random_graph

N, E, F, C = 12, 30, 3, 3
NAMED = (ValueError, FileNotFoundError)


def _valid() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    y = np.arange(N) % C
    train, val, test = (np.arange(N) % 3 == k for k in range(3))
    return dict(
        src=rng.integers(0, N, E).astype(np.int64),
        dst=rng.integers(0, N, E).astype(np.int64),
        x=rng.standard_normal((N, F)).astype(np.float32),
        y=y.astype(np.int64),
        train_mask=train,
        val_mask=val,
        test_mask=test,
    )


def _changed(**changes) -> dict:
    arrays = _valid()
    for name, value in changes.items():
        if value is None:
            arrays.pop(name)
        else:
            arrays[name] = value
    return arrays


def _with(name: str, fn) -> dict:
    arrays = _valid()
    arrays[name] = fn(arrays[name].copy())
    return arrays


def _set(array, index, value):
    array[index] = value
    return array


def npz_cases() -> dict[str, dict]:
    """name -> arrays of a malformed dataset .npz (every one must be refused)."""
    v = _valid()
    cases = {}
    for name in v:
        cases[f"missing {name}"] = _changed(**{name: None})
        cases[f"{name} as text"] = _changed(**{name: v[name].astype(str)})
        cases[f"{name} complex"] = _changed(**{name: v[name].astype(np.complex64)})
        cases[f"{name} 0-d"] = _changed(**{name: np.array(v[name].ravel()[0])})
        cases[f"{name} empty"] = _changed(**{name: v[name][:0]})
        cases[f"{name} 3-d"] = _changed(**{name: v[name].reshape(*v[name].shape, 1, 1)})
    for name in ("src", "dst"):
        cases[f"{name} float"] = _changed(**{name: v[name].astype(np.float64) + 0.5})
        cases[f"{name} one short"] = _changed(**{name: v[name][:-1]})
        for bad in (-1, -(2**40), N, N + 1, 2**31, 2**62):
            cases[f"{name} holds {bad}"] = _with(name, lambda a, bad=bad: _set(a, 3, bad))
    for bad in (np.nan, np.inf, -np.inf):
        for at in ((0, 0), (N - 1, F - 1), (5, 1)):
            cases[f"x {bad} at {at}"] = _with("x", lambda a, at=at, bad=bad: _set(a, at, bad))
    cases["x 1-d"] = _changed(x=v["x"][:, 0])
    cases["x one row short"] = _changed(x=v["x"][:-1])
    for name in ("y", "train_mask", "val_mask", "test_mask"):
        cases[f"{name} one short"] = _changed(**{name: v[name][:-1]})
        cases[f"{name} one long"] = _changed(**{name: np.concatenate([v[name], v[name][:1]])})
    for bad in (-2, -100, 99, 1000, 2**40):
        cases[f"label {bad}"] = _with("y", lambda a, bad=bad: _set(a, 4, bad))
    cases["float labels 0.5"] = _changed(y=v["y"].astype(np.float32) + 0.5)
    cases["float label nan"] = _with("y", lambda a: _set(a.astype(np.float64), 2, np.nan))
    cases["float label inf"] = _with("y", lambda a: _set(a.astype(np.float64), 2, np.inf))
    cases["multi-label 0.5"] = _changed(y=np.full((N, 2), 0.5, np.float32))
    cases["multi-label 2"] = _changed(y=np.full((N, 2), 2, np.int64))
    cases["unlabelled node in train"] = _with("y", lambda a: _set(a, 0, -1))  # node 0 is in train_mask
    cases["test mask == train mask"] = _changed(test_mask=v["train_mask"].copy())
    cases["val overlaps test"] = _with("val_mask", lambda a: _set(a, 2, True))
    cases["all masks all"] = _changed(**{m: np.ones(N, bool) for m in ("train_mask", "val_mask", "test_mask")})
    cases["masks float"] = _changed(**{m: v[m].astype(np.float32) for m in ("train_mask", "val_mask", "test_mask")})
    cases["masks [S, N] of other width"] = _changed(train_mask=np.ones((2, N + 1), bool))
    cases["masks [S, N, 1]"] = _changed(train_mask=v["train_mask"].reshape(1, N, 1))
    cases["empty graph"] = _changed(
        src=np.zeros(0, np.int64),
        dst=np.zeros(0, np.int64),
        x=np.zeros((0, F), np.float32),
        y=np.zeros(0, np.int64),
        **{m: np.zeros(0, bool) for m in ("train_mask", "val_mask", "test_mask")},
    )
    cases["edge_attr wrong rows"] = _changed(edge_attr=np.ones((E + 1, 2), np.float32))
    cases["edge_attr nan"] = _changed(edge_attr=_set(np.ones((E, 2), np.float32), (4, 1), np.nan))
    cases["edge_attr text"] = _changed(edge_attr=np.full((E, 2), "a"))
    return cases


def _refused(fn, *names) -> str | None:
    """None when ``fn()`` raises a named error whose message names one of ``names``; else what happened."""
    try:
        fn()
    except NAMED as err:
        if any(name in str(err) for name in names):
            return None
        return f"{type(err).__name__} without the file name: {err}"
    except Exception as err:  # noqa: BLE001 - what the test looks for
        return f"{type(err).__name__}: {err}"
    return "accepted"


def _loads_or_refused(fn, *names) -> str | None:
    got = _refused(fn, *names)
    return None if got == "accepted" else got


def test_malformed_npz_files_are_refused_by_name(tmp_path):
    cases = npz_cases()
    failures = {}
    for index, (case, arrays) in enumerate(cases.items()):
        path = str(tmp_path / f"case{index}.npz")
        np.savez(path, **arrays)
        if (got := _refused(lambda path=path: load_npz(path), path)) is not None:
            failures[case] = got
    assert not failures, failures
    assert len(cases) >= 90


def _bytes_cases(valid: bytes, rng: random.Random) -> dict[str, tuple[bytes, bool]]:
    """name -> (file bytes, must be refused)."""
    cases = {"empty file": (b"", True), "text": (b"src,dst\n0,1\n", True), "zeros": (bytes(len(valid)), True)}
    for _ in range(12):
        cut = rng.randrange(1, len(valid) - 1)
        cases[f"truncated at {cut}"] = (valid[:cut], True)
    for _ in range(12):
        data = bytearray(valid)
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
        cases[f"bit flip at {at}"] = (bytes(data), False)
    magic = valid.find(b"\x93NUMPY")
    cases["npy magic broken"] = (valid[:magic] + b"\x93NUMPX" + valid[magic + 6 :], True)
    header = valid.find(b"{'descr'")
    cases["npy header garbage"] = (valid[:header] + b"{'descr': 'garbage'" + valid[header + 19 :], True)
    return cases


@pytest.mark.parametrize("compressed", [False, True])
def test_truncated_and_corrupted_npz_bytes(tmp_path, compressed):
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **_valid())
    failures = {}
    for index, (case, (data, must_fail)) in enumerate(_bytes_cases(buffer.getvalue(), random.Random(7)).items()):
        path = str(tmp_path / f"bytes{index}.npz")
        with open(path, "wb") as f:
            f.write(data)
        check = _refused if must_fail else _loads_or_refused
        if (got := check(lambda path=path: load_npz(path), path)) is not None:
            failures[case] = got
    assert not failures, failures
    assert _refused(lambda: load_npz(str(tmp_path / "absent.npz")), "absent.npz") is None
    assert _refused(lambda: load_npz(str(tmp_path)), str(tmp_path)) is None  # a folder


def test_a_label_far_outside_the_others_needs_the_class_count(tmp_path):
    path = str(tmp_path / "outlier.npz")
    np.savez(path, **_with("y", lambda a: _set(a, 4, 99)))
    with pytest.raises(ValueError, match=r"node 4 has label 99.*0\.\.2.*num_classes"):
        load_npz(path)
    assert load_npz(path, choice=SplitChoice(num_classes=100)).num_classes == 100
    with pytest.raises(ValueError, match="label 99 .* 'num_classes' is 50"):
        load_npz(path, choice=SplitChoice(num_classes=50))


# --- the partition store --------------------------------------------------------------------------
PART = "part_0000"
PART_FILES = ("rowptr", "col", "x", "y", "train_mask", "val_mask", "test_mask", "halo")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    graph = random_graph(num_nodes=40, num_edges=160, num_features=4, num_classes=3)
    relabelled, perm, ranges = relabel(graph, partition_nodes(graph, 2, "metis"), 2)
    out = str(tmp_path_factory.mktemp("fuzz") / "store")
    write_store(relabelled, perm, ranges, out, "metis")
    return out


def _meta(folder: str) -> dict:
    with open(os.path.join(folder, META_FILE)) as f:
        return json.load(f)


def _write_meta(folder: str, meta) -> None:
    with open(os.path.join(folder, META_FILE), "w") as f:
        json.dump(meta, f) if not isinstance(meta, str) else f.write(meta)


def _replace_array(folder: str, name: str, fn) -> None:
    """Rewrites part 0's ``name`` with ``fn(array)`` and records its new checksum and size, so that
    only the contents checks can catch it."""
    from dsgraph.graph.store import file_sha256

    rel = f"{PART}/{name}.npy"
    path = os.path.join(folder, rel)
    np.save(path, fn(np.load(path).copy()))
    meta = _meta(folder)
    meta["sha256"][rel], meta["file_bytes"][rel] = file_sha256(path), os.path.getsize(path)
    _write_meta(folder, meta)


def _damage_file(folder: str, rel: str, how: str) -> None:
    path = os.path.join(folder, rel)
    if how == "missing":
        os.remove(path)
        return
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "longer":
        data += b"\0"
    else:  # a flipped byte in the data: same size, the checksum fails
        data[-1] ^= 0xFF
    with open(path, "wb") as f:
        f.write(data)


def _meta_changes(meta: dict) -> dict:
    """name -> a function of META.json's dict (or a str) that makes it malformed."""
    changes = {"meta garbage": lambda m: "{not json", "meta empty": lambda m: "", "meta list": lambda m: [1, 2]}
    for key in ("format_version", *[k for k in meta if k in _required_meta()]):
        changes[f"meta without {key}"] = lambda m, key=key: {k: v for k, v in m.items() if k != key}
    changes["meta format_version 99"] = lambda m: {**m, "format_version": 99}
    changes["meta format_version '1'"] = lambda m: {**m, "format_version": "1"}
    changes["meta one node range"] = lambda m: {**m, "node_ranges": m["node_ranges"][:1]}
    changes["meta three parts"] = lambda m: {**m, "num_parts": 3}
    changes["meta feature dtype float64"] = lambda m: {**m, "feature_dtype": "float64"}
    changes["meta more features"] = lambda m: {**m, "num_features": m["num_features"] + 1}
    changes["meta more edges"] = lambda m: {**m, "part_num_edges": [e + 1 for e in m["part_num_edges"]]}
    changes["meta wrong checksum"] = lambda m: {**m, "sha256": {k: "0" * 64 for k in m["sha256"]}}
    changes["meta wrong size"] = lambda m: {**m, "file_bytes": {k: v + 8 for k, v in m["file_bytes"].items()}}
    changes["meta no checksums"] = lambda m: {**m, "sha256": {}}
    return changes


def _required_meta() -> tuple[str, ...]:
    return ("num_parts", "num_nodes", "num_edges", "num_features", "feature_dtype", "node_ranges")


def _content_changes() -> dict:
    """name -> (array, function of it): contents that pass the checksum but are wrong."""
    return {
        "rowptr not from 0": ("rowptr", lambda a: a + 1),
        "rowptr not monotone": ("rowptr", lambda a: _set(a, 2, a[-1])),
        "col -1": ("col", lambda a: _set(a, 0, -1)),
        "col N": ("col", lambda a: _set(a, 0, 40)),
        "col huge": ("col", lambda a: _set(a, 3, 2**31 - 1)),
        "x nan": ("x", lambda a: _set(a, (0, 0), np.nan)),
        "x inf": ("x", lambda a: _set(a, (1, 2), np.inf)),
        "x float64": ("x", lambda a: a.astype(np.float64)),
        "x one feature short": ("x", lambda a: a[:, :-1]),
        "x transposed": ("x", lambda a: a.T.copy()),
        "y -2": ("y", lambda a: _set(a, 0, -2)),
        "y 99": ("y", lambda a: _set(a, 0, 99)),
        "y float": ("y", lambda a: a.astype(np.float32)),
        "y one short": ("y", lambda a: a[:-1]),
        "mask selects unlabelled": ("y", lambda a: np.full_like(a, -1)),
        "mask int": ("train_mask", lambda a: a.astype(np.int64)),
        "halo unsorted": ("halo", lambda a: a[::-1].copy()),
        "halo -1": ("halo", lambda a: _set(a, 0, -1)),
        "halo text": ("halo", lambda a: a.astype(str)),
        "rowptr int32": ("rowptr", lambda a: a.astype(np.int32)),
    }


def _store_cases(store: str) -> dict:
    """name -> a function that damages a copy of the store (every one must be refused)."""
    cases = {}
    for rel in [f"{PART}/{name}.npy" for name in PART_FILES] + [META_FILE]:
        for how in ("missing", "truncated", "longer", "flipped"):
            if rel == META_FILE and how in ("longer", "flipped"):
                continue
            cases[f"{rel} {how}"] = lambda d, rel=rel, how=how: _damage_file(d, rel, how)
    for case, change in _meta_changes(_meta(store)).items():
        cases[case] = lambda d, change=change: _write_meta(d, change(_meta(d)))
    for case, (name, fn) in _content_changes().items():
        cases[case] = lambda d, name=name, fn=fn: _replace_array(d, name, fn)
    return cases


def test_damaged_partition_stores_are_refused_by_name(store, tmp_path):
    cases = _store_cases(store)
    failures = {}
    for index, (case, damage) in enumerate(cases.items()):
        copy = str(tmp_path / f"store{index}")
        shutil.copytree(store, copy)
        damage(copy)
        if (got := _refused(lambda copy=copy: load_part(copy, 0, 2), copy)) is not None:
            failures[case] = got
    assert not failures, failures
    assert len(cases) >= 50


# --- the edge-list converter ---------------------------------------------------------------------
EDGE_LINES = {
    "letter id": "0 1\n1 x\n",
    "one column": "0 1\n2\n",
    "float id": "0 1\n1 2.5\n",
    "exponent id": "0 1\n1e3 2\n",
    "negative source": "0 1\n-1 2\n",
    "negative target": "0 1\n1 -3\n",
    "id beyond int32": "0 1\n2147483648 1\n",
    "nan id": "0 1\nnan 2\n",
    "empty": "",
    "comments only": "# nothing\n% here\n",
    "header only": "source target\n",
    "binary": "\x00\x01\x02\xff\n\x00",
    "text in the ids": "0 1 2\nz 2 1\n",
    "unterminated": "0 1\n1",
}
FEATURE_LINES = {
    "edge feature nan": "0 1 1.0\n1 2 nan\n",
    "edge feature inf": "0 1 1.0\n1 2 inf\n",
    "edge feature text": "0 1 1.0\n1 2 a\n",
    "edge features ragged": "0 1 1.0 2.0\n1 2 3.0\n",
    "edge features missing": "0 1\n1 2\n",
}
NPY = {  # --features / --labels arrays for the edge list 0 1, 1 2 (3 nodes)
    "features one row short": ("--features", np.ones((2, 4), np.float32)),
    "features 1-d": ("--features", np.ones(3, np.float32)),
    "features text": ("--features", np.full((3, 2), "a")),
    "features nan": ("--features", _set(np.ones((3, 2), np.float32), (1, 1), np.nan)),
    "features inf": ("--features", _set(np.ones((3, 2), np.float32), (2, 0), -np.inf)),
    "features complex": ("--features", np.ones((3, 2), np.complex64)),
    "labels float": ("--labels", np.array([0.5, 1.0, 0.0])),
    "labels 2-d": ("--labels", np.zeros((3, 2), np.int64)),
    "labels one short": ("--labels", np.zeros(2, np.int64)),
    "labels -5": ("--labels", np.array([0, -5, 1])),
    "labels text": ("--labels", np.array(["a", "b", "c"])),
}


def _convert(args: list[str], capsys) -> tuple[int | str, str]:
    try:
        code = convert.main(args)
    except SystemExit as exit:
        code = exit.code
    except Exception as err:  # noqa: BLE001 - what the test looks for
        return f"{type(err).__name__}: {err}", ""
    return code, capsys.readouterr().err


def _edge_cases(tmp: str) -> dict[str, tuple[list[str], str]]:
    """name -> (convert arguments, the file its message must name)."""
    cases = {}
    for delimiter in (" ", ",", "\t"):
        for case, text in {**EDGE_LINES, **FEATURE_LINES}.items():
            path = os.path.join(tmp, f"{len(cases)}.txt")
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text.replace(" ", delimiter))
            flags = ["--edge-features"] if case in FEATURE_LINES else []
            cases[f"{case} ({delimiter!r})"] = ([path, path + ".npz", *flags], path)
    good = os.path.join(tmp, "good.txt")
    with open(good, "w") as f:
        f.write("0 1\n1 2\n")
    for case, (flag, array) in NPY.items():
        path = os.path.join(tmp, f"{len(cases)}.npy")
        np.save(path, array)
        cases[case] = ([good, os.path.join(tmp, f"{len(cases)}.npz"), flag, path], path)
    with open(good, "rb") as f:
        packed = gzip.compress(f.read() * 50)
    for case, data in {"gzip truncated": packed[: len(packed) // 2], "gzip corrupt": packed[:12] + b"\0" * 20}.items():
        path = os.path.join(tmp, f"{len(cases)}.txt.gz")
        with open(path, "wb") as f:
            f.write(data)
        cases[case] = ([path, path + ".npz"], path)
    pickled = os.path.join(tmp, "objects.npy")
    np.save(pickled, np.array([object()] * 3), allow_pickle=True)
    cases["labels pickled"] = ([good, os.path.join(tmp, "p.npz"), "--labels", pickled], pickled)
    cases["missing input"] = ([os.path.join(tmp, "absent.txt"), os.path.join(tmp, "a.npz")], "absent.txt")
    return cases


def test_malformed_edge_lists_are_refused_by_name(tmp_path, capsys):
    cases = _edge_cases(str(tmp_path))
    failures = {}
    for case, (args, named) in cases.items():
        code, err = _convert(args, capsys)
        if code != 1 or named not in err:
            failures[case] = f"exit {code}: {err.strip()[-300:]}"
    assert not failures, failures
    assert len(cases) >= 60


def test_float_labels_and_a_test_mask_equal_to_the_train_mask_stay_refused(tmp_path):
    """The two inputs that once passed silently."""
    path = str(tmp_path / "float.npz")
    np.savez(path, **_changed(y=np.arange(N) % C + 0.5))
    with pytest.raises(ValueError, match=r"labels 'y' are float64 and node 0 holds 0.5, which is not a class id"):
        load_npz(path)
    np.savez(path, **_changed(test_mask=_valid()["train_mask"]))
    with pytest.raises(ValueError, match=r"train/val/test overlap \(train_mask & test_mask: 4 node\(s\)"):
        load_npz(path)
