"""A synthetic OGB node-property folder (raw/*.csv.gz and split/random, OGB's layout) for timing
``dsgraph convert`` of an OGB folder: N nodes, E uniform random edges, F features, 8 classes, written
in chunks through ``gzip -1``.

    python make_ogb.py OUT_DIR 4194304 67108864 32
"""

import io
import os
import subprocess
import sys

import numpy as np


def gz(path: str, chunks) -> None:
    with open(path, "wb") as out:
        zipper = subprocess.Popen(["gzip", "-1"], stdin=subprocess.PIPE, stdout=out)
        for text in chunks:
            zipper.stdin.write(text.encode())
        zipper.stdin.close()
        zipper.wait()


def csv(array: np.ndarray, spec: str) -> str:
    buffer = io.StringIO()
    np.savetxt(buffer, array, fmt=spec, delimiter=",")
    return buffer.getvalue()


def main(root: str, n: int, e: int, f: int) -> None:
    rng = np.random.default_rng(0)
    os.makedirs(f"{root}/raw", exist_ok=True)
    os.makedirs(f"{root}/split/random", exist_ok=True)
    gz(f"{root}/raw/num-node-list.csv.gz", [f"{n}\n"])
    chunk = 1 << 22
    edges = (csv(rng.integers(0, n, size=(min(chunk, e - lo), 2)), "%d") for lo in range(0, e, chunk))
    gz(f"{root}/raw/edge.csv.gz", edges)
    rows = chunk // f
    features = (csv(rng.standard_normal((min(rows, n - lo), f)).astype(np.float32), "%.4f") for lo in range(0, n, rows))
    gz(f"{root}/raw/node-feat.csv.gz", features)
    gz(f"{root}/raw/node-label.csv.gz", [csv(rng.integers(0, 8, size=(n, 1)), "%d")])
    order = rng.permutation(n)
    for stem, ids in (("train", order[: n // 2]), ("valid", order[n // 2 : 3 * n // 4]), ("test", order[3 * n // 4 :])):
        gz(f"{root}/split/random/{stem}.csv.gz", [csv(np.sort(ids)[:, None], "%d")])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
