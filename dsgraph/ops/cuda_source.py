"""Where the CUDA kernels live and how they are compiled: shared by the CuPy loader (``cuda.py``)
and the GPU-less NVRTC compile check (``tools/common/nvrtc.py``), so both compile exactly the same thing.

Kernels are compiled once per (device, file, dtype, head dim, score bias or not) with these as
compile-time constants (-DDSG_HEAD_DIM, -DDSG_BF16, -DDSG_BIAS); shapes other than D are runtime
arguments. Without a bias the kernels are exactly those of a build that never knew of one.
"""

from __future__ import annotations

import re
from pathlib import Path

CUDA_DIR = Path(__file__).resolve().parents[2] / "cuda"
HEAD_DIMS = (8, 16, 32, 64, 128)  # a power of two: D / (elements per 16-byte load) lanes per vector
DTYPES = ("float32", "bfloat16")
BLOCK_WARPS = 8  # warps per block of the chunk kernels; must equal dsg::BLOCK_WARPS in the .cuh

# file -> the kernels it defines (extern "C" names)
KERNELS = {
    "sparse_attention_fwd.cu": ("sa_forward_small", "sa_forward_warp", "sa_forward_chunk", "sa_forward_merge"),
    "sparse_attention_bwd.cu": (
        "sa_delta",
        "sa_dq_small",
        "sa_dq_warp",
        "sa_dq_chunk",
        "sa_dq_merge",
        "sa_dkdv_small",
        "sa_dkdv_warp",
        "sa_dkdv_chunk",
        "sa_dkdv_merge",
    ),
}


def elements_per_load(dtype: str) -> int:
    """Elements in one 16-byte vector load: 4 fp32 or 8 bf16 (DSG_VEC in the .cuh)."""
    return 8 if dtype == "bfloat16" else 4


def team_size(dtype: str, head_dim: int) -> int:
    """Lanes that hold one D-vector (TEAM in the .cuh)."""
    return head_dim // elements_per_load(dtype)


def kernel_source(file: str) -> str:
    """The source of cuda/<file> with its local includes inlined, so that the text alone decides
    what is compiled (CuPy's kernel cache is keyed by the text). #line directives keep compiler
    messages pointing at the real files and lines."""
    path = CUDA_DIR / file
    out = [f'#line 1 "{path}"']
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = re.fullmatch(r'\s*#include\s+"([^"]+)"\s*', line)
        if match and (CUDA_DIR / match.group(1)).is_file():
            header = CUDA_DIR / match.group(1)
            out.append(f'#line 1 "{header}"')
            out.extend(h for h in header.read_text().splitlines() if h.strip() != "#pragma once")
            out.append(f'#line {number + 1} "{path}"')
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def compile_options(dtype: str, head_dim: int, bias: bool = False) -> tuple[str, ...]:
    """NVRTC options besides the target architecture; ``bias``: the kernels that take a score bias."""
    if dtype not in DTYPES:
        raise ValueError(f"cuda kernels: dtype {dtype} is not supported; use one of {DTYPES}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"cuda kernels: head dim {head_dim} is not supported; use one of {HEAD_DIMS}")
    # No -std: NVRTC 12+ defaults to C++17 and CuPy may add its own.
    return (
        f"-DDSG_HEAD_DIM={head_dim}",
        f"-DDSG_BF16={int(dtype == 'bfloat16')}",
        f"-DDSG_BIAS={int(bias)}",
    )
