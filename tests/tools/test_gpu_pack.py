"""tools/gpu/pack.py without the network: wheel tags, requirements, duplicates and the size limit."""

import zipfile

import pytest

from tools.gpu import pack


@pytest.mark.parametrize(
    "filename, ok",
    [
        ("deepspeed-0.19.8-py3-none-any.whl", True),
        ("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", True),
        ("pydantic_core-2.50.5-cp311-cp311-manylinux2014_x86_64.whl", False),
        ("pydantic_core-2.50.5-cp312-cp312-manylinux_2_17_aarch64.whl", False),
        ("pydantic_core-2.50.5-cp312-cp312-macosx_11_0_arm64.whl", False),
        ("cryptography-44.0.0-cp39-abi3-manylinux_2_28_x86_64.whl", True),
    ],
)
def test_wheel_tags(filename, ok):
    assert pack.installs_on_target(filename) is ok


def _wheel(folder, name, version, requires=(), size=0):
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
        z.writestr("padding.bin", b"\0" * size)
    return path


def test_a_complete_pack_passes_and_lists_every_wheel(tmp_path):
    _wheel(tmp_path, "deepspeed", "0.19.8", ["hjson", "torch>=2.0", "pydantic>=2", 'docutils<0.18; extra == "dev"'])
    _wheel(tmp_path, "hjson", "3.1.0")
    _wheel(tmp_path, "pydantic", "2.14.4", ['tomli; python_version < "3.11"'])  # marker false on 3.12
    entries = pack.check_pack(tmp_path, max_mib=60)
    assert [e["name"] for e in entries] == ["deepspeed", "hjson", "pydantic"] and all(
        len(e["sha256"]) == 64 for e in entries
    )


def test_a_requirement_missing_everywhere_is_named(tmp_path):
    _wheel(tmp_path, "deepspeed", "0.19.8", ["hjson", "pydantic>=2"])
    _wheel(tmp_path, "hjson", "3.1.0")
    with pytest.raises(ValueError, match=r"not packed and not on the GPU image: pydantic \(needed by deepspeed\)"):
        pack.check_pack(tmp_path, max_mib=60)


def test_two_versions_and_oversize_are_refused(tmp_path):
    _wheel(tmp_path, "hjson", "3.1.0")
    _wheel(tmp_path, "hjson", "3.0.2")
    with pytest.raises(ValueError, match="more than one version of hjson"):
        pack.check_pack(tmp_path, max_mib=60)
    big = tmp_path / "big"
    big.mkdir()
    _wheel(big, "hjson", "3.1.0", size=2 * 2**20)
    with pytest.raises(ValueError, match="over the 1 MiB that may travel"):
        pack.check_pack(big, max_mib=1)
