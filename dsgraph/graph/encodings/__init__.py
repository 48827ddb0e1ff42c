"""Node encodings: per-node arrays that ride with the features (docs/guides/encodings.md).

One spec class per encoding (``spec.py``: its name, arrays, whether it is stored or counted, how it
is computed, what the model does with it), listed in ``registry.py``: ``rwse.py`` (random-walk
return probabilities), ``lappe.py`` (Laplacian eigenvectors and eigenvalues), both computed by
``dsgraph encode`` and stored with the dataset, and ``degree.py`` (in- and out-degrees, counted
when a graph is read). ``arrays.py`` handles their arrays for every loader. The model's
``encodings`` option names the ones a run feeds in.

A ``Graph`` holds such arrays in ``Graph.enc`` and a rank's ``NodeData`` in ``NodeData.enc``
(name -> array), under the specs' array names.
"""

from dsgraph.graph.encodings.arrays import (
    as_tensors,
    check_values,
    counted,
    csr_edges,
    encode_command,
    missing_error,
    select,
    widths,
)
from dsgraph.graph.encodings.degree import degrees
from dsgraph.graph.encodings.registry import (
    all_arrays,
    arrays_of,
    chosen,
    encoding_names,
    get_encoding,
    register,
    spec_of_array,
    specs,
    stored_arrays,
)
from dsgraph.graph.encodings.spec import EncodingSpec

__all__ = [
    "EncodingSpec",
    "all_arrays",
    "arrays_of",
    "as_tensors",
    "check_values",
    "chosen",
    "counted",
    "csr_edges",
    "degrees",
    "encode_command",
    "encoding_names",
    "get_encoding",
    "missing_error",
    "register",
    "select",
    "spec_of_array",
    "specs",
    "stored_arrays",
    "widths",
]
