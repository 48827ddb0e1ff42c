"""The link decoders: the chunked dot product equals the plain gathered one (scores and the table's
gradient, across chunk boundaries, repeated rows, fp32 and bf16); the MLP decoder is symmetric."""

import pytest
import torch

from dsgraph.models import link
from dsgraph.models.link import MlpDecoder, make_decoder, pair_dot


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pair_dot_equals_the_gathered_product(dtype):
    torch.manual_seed(0)
    m, rows, d = 2 * link.CHUNK + 123, 500, 16  # three chunks, the last one short
    table = torch.randn(rows, d).to(dtype).requires_grad_()
    u, v = torch.randint(0, rows, (m,)), torch.randint(0, rows, (m,))
    v[:1000] = 7  # one row in many pairs
    grad = torch.randn(m)
    got = pair_dot(table, u, v)
    (got * grad).sum().backward()
    got_grad, table.grad = table.grad, None
    ref_table = table.detach().double().requires_grad_()
    ref = (ref_table[u] * ref_table[v]).sum(1)
    (ref * grad.double()).sum().backward()
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), ref, rtol=1e-5, atol=1e-4)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert got_grad.dtype == dtype
    assert torch.allclose(got_grad.double(), ref_table.grad, rtol=tol, atol=tol * 10)


def test_decoders_score_a_pair_the_same_in_either_direction():
    torch.manual_seed(1)
    table = torch.randn(20, 8)
    u, v = torch.randint(0, 20, (50,)), torch.randint(0, 20, (50,))
    for decoder in (make_decoder("dot", 8, 8), MlpDecoder(8, 12)):
        assert torch.allclose(decoder(table, u, v), decoder(table, v, u))
    with pytest.raises(ValueError, match="dot, mlp"):
        make_decoder("bilinear", 8, 8)
