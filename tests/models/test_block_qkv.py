"""A block hands the attention contiguous q, k, v (the kernels then read them in place) that are the
three thirds of its ``qkv`` projection."""

import torch

from dsgraph.models.blocks import TransformerBlock


def test_block_gives_the_attention_contiguous_thirds_of_qkv():
    torch.manual_seed(0)
    block = TransformerBlock(hidden=32, heads=4, ffn_mult=2, dropout=0.0)
    h = torch.randn(50, 32)
    seen = []

    def attention(q, k, v):
        seen.extend((q, k, v))
        return q + k * v

    block(h, attention, torch.arange(50), seed=0, step=0, layer=1)
    fused = torch.nn.functional.linear(block.attn_norm(h), block.qkv.weight, block.qkv.bias).view(50, 3, 4, 8).unbind(1)
    for got, want in zip(seen, fused):
        assert got.is_contiguous() and got.shape == (50, 4, 8)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
