"""How much a piece of work grows a fresh process's anonymous memory (``RssAnon``: what the process
holds; memory-mapped files are page cache the kernel takes back). The kernel keeps no peak of it, so
a thread samples it every 2 ms. For the out-of-core conversion tests."""

import json
import os
import subprocess
import sys

SAMPLER = """
import json, sys, threading, time
from dsgraph.runtime.host_memory import fix_mmap_threshold
fix_mmap_threshold()  # as the commands do: freed temporaries go back to the system
{imports}

def anon_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))

before = anon_kb()
peak, done = [before], threading.Event()

def sample():  # keeps the largest value only: a growing list of samples would be measured too
    while not done.is_set():
        peak[0] = max(peak[0], anon_kb())
        time.sleep(0.002)

thread = threading.Thread(target=sample)
thread.start()
{work}
done.set()
thread.join()
print(json.dumps({{"grew_kb": peak[0] - before, "edges": stats.num_edges}}))
"""


def grown_kb(imports: str, work: str, *args: str) -> dict:
    """Runs ``imports`` (before the first sample), then ``work`` (Python lines that set ``stats``, a
    result with ``num_edges``; ``sys.argv[1:]`` is ``args``) in a child process; returns
    {"grew_kb": the largest growth seen, "edges": stats.num_edges}."""
    code = SAMPLER.format(imports=imports, work=work)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
