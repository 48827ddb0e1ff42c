"""The node encodings dsgraph knows: one spec per encoding (``spec.py``), registered once.

The model's options and encoder, the loaders, the partition store, the link task's check and
``dsgraph encode`` read this registry; a new encoding is its own file plus one line below. The
order of the lines is the order in which the model concatenates the encodings' columns.
"""

from __future__ import annotations

import importlib

from dsgraph.graph.encodings.spec import EncodingSpec

_ENCODINGS: dict[str, EncodingSpec] = {}

BUILTIN = (  # the registry: one line per encoding, "module:class"
    "dsgraph.graph.encodings.rwse:Rwse",
    "dsgraph.graph.encodings.lappe:LapPE",
    "dsgraph.graph.encodings.degree:Degree",
)


def register(spec: EncodingSpec) -> EncodingSpec:
    """Adds ``spec``; ValueError for a name or an array another encoding has, or a counted encoding
    (or one the model embeds) with other than one unsigned array."""
    taken = {array for other in _ENCODINGS.values() for array in other.arrays}
    if not spec.name or spec.name in _ENCODINGS or not spec.arrays or taken & set(spec.arrays):
        raise ValueError(
            f"an encoding needs a new, non-empty name and arrays of its own; got {spec.name!r} {spec.arrays}"
        )
    if (spec.embeddings or not spec.stored) and (len(spec.arrays) != 1 or spec.signed):
        raise ValueError(f"encoding {spec.name!r}: a counted one, or one with embeddings, has one unsigned array")
    _ENCODINGS[spec.name] = spec
    return spec


def get_encoding(name: str) -> EncodingSpec:
    if name not in _ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; choose from {', '.join(_ENCODINGS)}")
    return _ENCODINGS[name]


def encoding_names() -> list[str]:
    return list(_ENCODINGS)


def specs() -> list[EncodingSpec]:
    """Every spec, in registry order."""
    return list(_ENCODINGS.values())


def chosen(names) -> list[EncodingSpec]:
    """The specs of the encodings ``names`` (the model's option), in registry order."""
    arrays_of(names)  # unknown names are errors
    return [spec for name, spec in _ENCODINGS.items() if name in names]


def spec_of_array(array: str) -> EncodingSpec:
    """The encoding that reads the node array ``array``."""
    for spec in _ENCODINGS.values():
        if array in spec.arrays:
            return spec
    raise ValueError(f"no encoding reads an array {array!r}; the encoding arrays are {', '.join(all_arrays())}")


def all_arrays() -> tuple[str, ...]:
    return tuple(array for spec in _ENCODINGS.values() for array in spec.arrays)


def stored_arrays() -> tuple[str, ...]:
    """The arrays ``dsgraph encode`` computes and writes beside the features."""
    return tuple(array for spec in _ENCODINGS.values() if spec.stored for array in spec.arrays)


def arrays_of(names) -> tuple[str, ...]:
    """The node arrays that the encodings ``names`` read, in registry order."""
    unknown = [name for name in names if name not in _ENCODINGS]
    if unknown:
        raise ValueError(f"unknown encoding(s) {', '.join(map(repr, unknown))}; choose from {', '.join(_ENCODINGS)}")
    return tuple(array for name, spec in _ENCODINGS.items() if name in names for array in spec.arrays)


def _register_builtin() -> None:
    for entry in BUILTIN:
        module, cls = entry.split(":")
        register(getattr(importlib.import_module(module), cls)())


_register_builtin()
