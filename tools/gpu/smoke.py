"""The first step of tools/gpu/check.sh: one fp32 and one bf16 forward+backward of the CUDA kernels
against the pure-torch reference (in fp32) on a small power-law graph with a hub row (every bin:
small rows, warp rows, a chunked row), about 10 s with compiles. If it fails, nothing after it can
pass, so check.sh ends the run at once, with this traceback in the results.

    python -m tools.gpu.smoke               # on the GPU: backend cuda, tensors on cuda:0
    python -m tools.gpu.smoke --emulate     # the rehearsal: the same host path, kernels run by the
                                            # CUDA emulator (tests/cuda_emulator) on CPU tensors

On the GPU it then reads the device's SM utilisation and memory used through NVML the way training
does (``dsgraph.train.utilisation``, nvidia-ml-py) and prints them; a failure there is printed but
does not fail the step (the kernels are what every later step needs).

Exit 0 when both dtypes match within the kernels' tolerance (fp32 1e-4, bf16 2e-2 relative to the
largest value), 1 with the traceback otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

import torch

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}
HUB_DEGREE = 4500  # past the chunk length (4096): the chunked pass and its merge run


def smoke_graph(scale: int = 9, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """rmat:scale (rows of every small degree, rows with none) plus one hub row of HUB_DEGREE in-edges."""
    from dsgraph.graph import load_dataset

    g = load_dataset(f"rmat:{scale}", seed=seed)
    n = g.rowptr.numel() - 1
    hub = torch.randint(0, n, (HUB_DEGREE,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)
    rowptr = torch.cat([g.rowptr, g.rowptr[-1:] + HUB_DEGREE])
    return rowptr, torch.cat([g.col.to(torch.int32), hub]), n


def forward_backward(backend: str, rowptr, col, q, k, v, dy) -> list[torch.Tensor]:
    from dsgraph.ops import sparse_attention

    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    y = sparse_attention(rowptr, col, q, k, v, backend=backend)
    return [y, *torch.autograd.grad(y, (q, k, v), dy)]


def check_dtype(backend: str, device: str, dtype: torch.dtype, heads: int = 2, dim: int = 16) -> str:
    """One forward+backward of ``backend`` against the reference in fp32; AssertionError on a mismatch."""
    rowptr, col, n = smoke_graph()
    gen = torch.Generator().manual_seed(1)
    q, k, v, dy = (torch.randn(rows, heads, dim, generator=gen) for rows in (n + 1, n, n, n + 1))
    want = forward_backward("reference", rowptr, col, q, k, v, dy)
    on = [t.to(device) for t in (rowptr, col)]
    got = forward_backward(backend, *on, *(t.to(device, dtype) for t in (q, k, v, dy)))
    for name, a, b in zip(("y", "dq", "dk", "dv"), got, want):
        err = ((a.float().cpu() - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
        assert torch.isfinite(a).all() and err <= TOLERANCE[dtype], f"{dtype} {name}: relative error {err:.2e}"
    return (
        f"{str(dtype).split('.')[-1]}: y, dq, dk, dv within {TOLERANCE[dtype]:g} of the reference (E={col.numel():,})"
    )


def emulated_backend() -> str:
    """Puts the emulator in place of CuPy and registers the CUDA backend for CPU tensors (as
    tests/ops/test_cuda_emulated.py does); returns its name."""
    import tests.cuda_emulator as emulator
    from dsgraph.ops import cuda, register_backend
    from tests.ops.test_cuda_emulated import EmulatedCudaBackend

    reason = emulator.unavailable()
    if reason:
        raise RuntimeError(f"CUDA emulator: {reason}")
    cuda.cupy = emulator.fake_cupy
    register_backend(EmulatedCudaBackend())
    return EmulatedCudaBackend.name


def nvml_line() -> str:
    """One line of NVML's figures for cuda:0 (the training path's sampler), or why there are none."""
    from dsgraph.train.utilisation import open_nvml

    try:
        sampler = open_nvml(torch.device("cuda", 0), interval_s=0.05)
        if sampler is None:
            return "nvml: nvidia-ml-py (pynvml) is not installed: training reports no GPU utilisation"
        time.sleep(0.3)
        figures = sampler.take()
        sampler.close()
        return f"nvml: SM utilisation {figures['gpu_sm_util']:.0f}%, memory used {figures['gpu_mem_used_mb']:.0f} MB"
    except Exception as err:  # noqa: BLE001 - reported, not fatal: the kernels passed
        return f"nvml: FAILED ({type(err).__name__}: {err}); training would report no GPU utilisation"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--emulate", action="store_true", help="CPU tensors, kernels run by the CUDA emulator (the rehearsal)"
    )
    args = p.parse_args(argv)
    began = time.perf_counter()
    try:
        backend, device = (emulated_backend(), "cpu") if args.emulate else ("cuda", "cuda")
        for dtype in (torch.float32, torch.bfloat16):
            print(
                f"smoke: {backend}: {check_dtype(backend, device, dtype)} ({time.perf_counter() - began:.1f} s)",
                flush=True,
            )
    except Exception:  # noqa: BLE001 - the traceback is the result: check.sh stops the run and keeps it
        traceback.print_exc(file=sys.stdout)
        print(f"smoke: FAILED after {time.perf_counter() - began:.1f} s: nothing after this step can pass")
        return 1
    if not args.emulate:
        print(nvml_line(), flush=True)
    print(f"smoke: PASSED in {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
