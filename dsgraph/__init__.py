"""dsgraph: full-graph distributed training of Graph Transformers on DeepSpeed."""

import os

__version__ = "0.1.0"

# torch's CPU allocator (c10's alloc_cpu) puts its blocks of 2 MiB or more in transparent huge pages
# when this is 1 at its first such block; the CPU kernels gather rows from them in place
# (dsgraph/ops/cpu/huge_pages.py says why and what it saves). A user's own setting, 0 included, is kept.
TORCH_THP_SWITCH = "THP_MEM_ALLOC_ENABLE"
os.environ.setdefault(TORCH_THP_SWITCH, "1")
