"""The failure log of a job that restarts by itself (``dsgraph train --max-restarts N``).

The launcher names a file in ``DSGRAPH_FAILURE_LOG``; a rank that ends because of a fault (a peer
died, a peer's heartbeat stopped, its own watchdog fired) appends one JSON line to it: the attempt
(torch elastic's restart count), the rank and the message it printed. A rank that is killed writes
nothing, but its peers' lines name it. After a restart, rank 0 says which failures it restarts from;
when the launcher gives up it prints every line (``summary``).
"""

from __future__ import annotations

import json
import os
import time

ENV = "DSGRAPH_FAILURE_LOG"


def attempt() -> int:
    """How many times torch elastic restarted this rank's worker group (0 outside torch elastic)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def record(rank: int | None, message: str, environ=os.environ) -> None:
    """Appends this rank's failure to the job's log (nothing when the launcher set none)."""
    path = environ.get(ENV)
    if not path:
        return
    line = json.dumps({"time": time.time(), "attempt": attempt(), "rank": rank, "message": message.strip()})
    with open(path, "a") as f:  # one short line per write: appends of several ranks do not interleave
        f.write(line + "\n")


def restart_state(checkpoint_dir: str, environ=os.environ) -> tuple[bool, list[dict]] | None:
    """Rank 0, at start-up under the launcher's failure log: None on the job's first attempt (it
    leaves a marker beside the log), else (a checkpoint exists in ``checkpoint_dir``, the failures
    recorded so far)."""
    from dsgraph.train.checkpoint import list_tags

    path = environ.get(ENV)
    if not path:
        return None
    marker = path + ".started"
    if not os.path.exists(marker):
        open(marker, "w").close()
        return None
    return bool(list_tags(checkpoint_dir)), read(path)


def restart_event(records: list[dict], world: int, start_epoch: int, step: int) -> dict:
    """The metrics row of a restart: the world size now, the epoch training continues at, the failures."""
    line = (
        f"restarted by torch elastic on {world} ranks after {len(records)} recorded failures; "
        + (f"resumed from the checkpoint of epoch {start_epoch - 1}" if start_epoch else "no checkpoint: from epoch 0")
        + "".join(f"\n  attempt {r['attempt']} rank {r['rank']}: {r['message']}" for r in records)
    )
    return {
        "kind": "restart",
        "step": step,
        "world_size": world,
        "resumed_epoch": start_epoch,
        "failures": [r["message"] for r in records],
        "text": ("restart", line),
    }


def read(path: str | None) -> list[dict]:
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summary(records: list[dict]) -> str:
    """One line per recorded failure, oldest first."""
    if not records:
        return "no rank recorded a failure (a rank killed outright records nothing; see the agents' lines above)"
    lines = []
    for r in sorted(records, key=lambda r: r["time"]):
        stamp = time.strftime("%H:%M:%S", time.gmtime(r["time"]))
        lines.append(f"  {stamp} UTC attempt {r['attempt']} rank {r['rank']}: {r['message']}")
    return "\n".join(lines)
