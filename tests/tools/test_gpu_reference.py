"""tools/gpu/reference.py: the committed CPU reference losses are from the sources as they are (a
change to the package, the GPU config or the training tools without a new reference fails here), a
reference with a failed run is refused and the old one kept, and a stale one names what changed."""

import json
import shutil

from tools.gpu import reference, train_inprocess
from tools.gpu.train_check import ROOT


def test_the_committed_reference_is_from_these_sources_and_every_run_passed():
    problems = reference.check(reference.REFERENCE)
    assert problems == [], "\n".join(problems)


def _candidate(tmp_path, **changes):
    ref = json.loads(reference.REFERENCE.read_text())
    ref.pop("files")
    for run in ref["runs"]:
        run.update(changes.get(run["name"], {}))
    path = tmp_path / "candidate.json"
    path.write_text(json.dumps(ref))
    return path


def test_a_reference_with_a_failed_run_is_refused_and_the_old_one_kept(tmp_path):
    target = tmp_path / "reference_losses.json"
    target.write_text("the old reference\n")
    timed_out = {"returncode": 124, "seconds": 300.0, "log_tail": "RunTimeout: passed its time limit of 300 s"}
    problems = reference.accept(_candidate(tmp_path, **{"rmat20-bf16-ag": timed_out}), target)
    assert problems == ["rmat20-bf16-ag: failed (exit 124 after 300.0 s: RunTimeout: passed its time limit of 300 s)"]
    assert target.read_text() == "the old reference\n"
    assert (
        reference.main(
            ["--accept", str(_candidate(tmp_path, **{"cora-bf16-ag": {"losses": [1.0]}})), "--to", str(target)]
        )
        == 1
    )
    assert target.read_text() == "the old reference\n"


def test_a_good_candidate_is_accepted_with_a_digest_per_file(tmp_path):
    target = tmp_path / "reference_losses.json"
    assert reference.accept(_candidate(tmp_path), target) == []
    files = json.loads(target.read_text())["files"]
    assert "dsgraph/ops/cuda.py" in files and "tools/gpu/train_inprocess.py" in files
    assert reference.check(target) == []


def test_a_kernel_change_makes_the_reference_stale_naming_the_file(tmp_path):
    for top in train_inprocess.FINGERPRINT_PATHS:
        src, dst = ROOT / top, tmp_path / top
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_file():
            shutil.copyfile(src, dst)
        else:
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    ref = json.loads(reference.REFERENCE.read_text())
    assert reference.staleness(ref, tmp_path) == ""
    kernel = tmp_path / "cuda" / "sparse_attention_fwd.cu"
    kernel.write_text(kernel.read_text() + "\n// a change\n")
    stale = reference.staleness(ref, tmp_path)
    assert "(changed since: cuda/sparse_attention_fwd.cu);" in stale and "check.sh --prepare" in stale
