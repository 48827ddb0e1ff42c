"""The CPU emulator itself: warp collectives give CUDA's results, and every misuse it promises to
catch (out of bounds, misalignment, a barrier or mask that some threads never reach, masks that do
not match, arguments that do not match the kernel's signature) is an EmulatorError, not a hang."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tests.cuda_emulator as emulator
from tests.cuda_emulator import EmulatorError, fake_cupy

pytestmark = [  # the emulator runs each kernel module in a child process
    pytest.mark.slow,
    pytest.mark.skipif(bool(emulator.unavailable()), reason=f"CUDA emulator: {emulator.unavailable()}"),
]

SOURCE = r"""
extern "C" __global__ void collectives(const float* x, float* out, int width) {
  const int t = threadIdx.x;
  const float v = x[t];
  out[0 * 32 + t] = __shfl_sync(0xffffffffu, v, 3, width);
  out[1 * 32 + t] = __shfl_up_sync(0xffffffffu, v, 2, width);
  out[2 * 32 + t] = __shfl_down_sync(0xffffffffu, v, 2, width);
  out[3 * 32 + t] = __shfl_xor_sync(0xffffffffu, v, 1, width);
  out[4 * 32 + t] = __int_as_float(__ballot_sync(0xffffffffu, t % 3 == 0));
  float s = v;  // a team-masked butterfly, as the attention kernels do it
  const unsigned team = 0xffu << (t & ~7);
  for (int o = 4; o > 0; o >>= 1) s += __shfl_xor_sync(team, s, o);
  out[5 * 32 + t] = s;
}
extern "C" __global__ void block_sum(const float* x, float* out) {
  __shared__ float partial[8];
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; ++w) s += partial[w];
    out[blockIdx.x] = s;
  }
}
extern "C" __global__ void lanes_exit_before_shuffle(const float* x, float* out, int n) {
  if ((int)threadIdx.x >= n) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}
extern "C" __global__ void barrier_in_branch(float* out) {
  if (threadIdx.x < 64) __syncthreads();
  out[threadIdx.x] = 1.0f;
}
extern "C" __global__ void shuffle_waits_for_barrier(float* out) {
  if (threadIdx.x == 0) out[0] = __shfl_sync(0x3u, 1.0f, 1);
  else __syncthreads();
}
extern "C" __global__ void mask_without_own_lane(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xfffffffeu, 1.0f, 1);
}
extern "C" __global__ void reads_outside_mask(float* out) {
  const unsigned half = threadIdx.x < 16 ? 0x0000ffffu : 0xffff0000u;
  out[threadIdx.x] = __shfl_xor_sync(half, 1.0f, 16);
}
extern "C" __global__ void masks_disagree(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(threadIdx.x == 0 ? 0x3u : 0xffffffffu, 1.0f, 1);
}
extern "C" __global__ void reads_past_the_end(const float* x, float* out) {
  out[threadIdx.x] = x[threadIdx.x + 1];
}
extern "C" __global__ void misaligned_vector_load(const float* x, float* out) {
  out[0] = __ldg(reinterpret_cast<const float4*>(x + 1)).x;
}
"""


@pytest.fixture(scope="module")
def module():
    mod = fake_cupy.RawModule(code=SOURCE, options=())
    mod.compile()
    yield mod
    emulator.shutdown()


def dl(t):
    return fake_cupy.from_dlpack(t)


@pytest.mark.parametrize("width", [32, 8])
def test_collectives_give_cuda_results(module, width):
    x = torch.arange(32, dtype=torch.float32) * 10
    out = torch.full((6 * 32,), float("nan"))
    module.get_function("collectives")((1,), (32,), (dl(x), dl(out), np.int32(width)))
    lane = torch.arange(32)
    group = lane - lane % width
    within = lane % width
    assert torch.equal(out[:32], x[group + 3 % width])
    assert torch.equal(out[32:64], torch.where(within >= 2, x[(lane - 2).clamp_min(0)], x))
    assert torch.equal(out[64:96], torch.where(within + 2 < width, x[(lane + 2).clamp_max(31)], x))
    assert torch.equal(out[96:128], x[lane ^ 1])
    ballot = sum(1 << i for i in range(32) if i % 3 == 0)
    assert set(out[128:160].view(torch.int32).tolist()) == {np.uint32(ballot).view(np.int32)}
    assert torch.equal(out[160:], x.view(4, 8).sum(1).repeat_interleave(8))


def test_shared_memory_and_barrier(module):
    x = torch.randn(3 * 256)
    out = torch.empty(3)
    module.get_function("block_sum")((3,), (256,), (dl(x), dl(out)))
    torch.testing.assert_close(out, x.view(3, 256).sum(1))


@pytest.mark.parametrize(
    "kernel, block, message",
    [
        ("lanes_exit_before_shuffle", 32, "exited"),
        ("barrier_in_branch", 128, "barrier not every thread reaches"),
        ("shuffle_waits_for_barrier", 2, "deadlock"),
        ("mask_without_own_lane", 32, "does not name its own lane"),
        ("reads_outside_mask", 32, "not in mask"),
        ("masks_disagree", 32, "do not match"),
        ("misaligned_vector_load", 1, "not 16-byte aligned"),
        ("reads_past_the_end", 32, "SUMMARY: AddressSanitizer: heap-buffer-overflow"),
    ],
)
def test_misuse_is_an_error_not_a_hang(module, kernel, block, message):
    x, out = torch.zeros(32), torch.zeros(128)
    args = {
        "lanes_exit_before_shuffle": (dl(x), dl(out), np.int32(20)),
        "misaligned_vector_load": (dl(x), dl(out)),
        "reads_past_the_end": (dl(x), dl(out)),
    }.get(kernel, (dl(out),))
    with pytest.raises(EmulatorError, match=message):
        module.get_function(kernel)((1,), (block,), args)
    x2, out2 = torch.arange(32, dtype=torch.float32), torch.zeros(6 * 32)  # the module still works afterwards
    module.get_function("collectives")((1,), (32,), (dl(x2), dl(out2), np.int32(32)))
    assert out2[96:128].tolist() == [float(i ^ 1) * 1 for i in range(32)]


def test_arguments_are_checked_against_the_signature(module):
    fn = module.get_function("collectives")
    x, out = torch.zeros(32), torch.zeros(6 * 32)
    with pytest.raises(EmulatorError, match="2 arguments for 3"):
        fn((1,), (32,), (dl(x), dl(out)))
    with pytest.raises(EmulatorError, match="i64, the parameter is i32"):
        fn((1,), (32,), (dl(x), dl(out), np.int64(32)))
    with pytest.raises(EmulatorError, match="numpy scalar"):
        fn((1,), (32,), (dl(x), dl(out), 32))
    with pytest.raises(EmulatorError, match="torch.int32, the parameter points to f32"):
        fn((1,), (32,), (dl(x.int()), dl(out), np.int32(32)))
    with pytest.raises(EmulatorError, match="overlaps"):
        fn((1,), (32,), (dl(out[:32]), dl(out), np.int32(32)))
    with pytest.raises(EmulatorError, match="not contiguous"):
        dl(torch.zeros(4, 4).t())
    with pytest.raises(EmulatorError, match="invalid configuration"):
        fn((0,), (32,), (dl(x), dl(out), np.int32(32)))
    with pytest.raises(EmulatorError, match="no kernel named"):
        module.get_function("missing")
