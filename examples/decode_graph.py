"""Decode steps of a small randomly initialised Qwen3-shaped transformer, replayed
from a CUDA graph (no downloads: the weights are random).

    gpuobs record --mode block_trace -- python examples/decode_graph.py --steps 16
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn


def qwen3_shape(layers: int, hidden: int = 1024) -> dict:
    """Shapes from transformers' Qwen3Config when it is installed (same numbers otherwise)."""
    shape = dict(
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=32768,
        rms_norm_eps=1e-6,
        rope_theta=1e6,
    )
    try:
        from transformers import Qwen3Config

        cfg = Qwen3Config(**shape)
        shape = {k: getattr(cfg, k) for k in shape}
    except Exception:
        pass
    return shape


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(v + self.eps)).to(x.dtype) * self.weight


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Layer(nn.Module):
    def __init__(self, c, batch, max_len, device, dtype):
        super().__init__()
        h, nh, nkv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.nh, self.nkv, self.hd = nh, nkv, hd
        self.input_norm = RMSNorm(h, c["rms_norm_eps"])
        self.post_norm = RMSNorm(h, c["rms_norm_eps"])
        self.q_proj = nn.Linear(h, nh * hd, bias=False)
        self.k_proj = nn.Linear(h, nkv * hd, bias=False)
        self.v_proj = nn.Linear(h, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(hd, c["rms_norm_eps"])
        self.gate = nn.Linear(h, c["intermediate_size"], bias=False)
        self.up = nn.Linear(h, c["intermediate_size"], bias=False)
        self.down = nn.Linear(c["intermediate_size"], h, bias=False)
        self.register_buffer("k_cache", torch.zeros(batch, nkv, max_len, hd, device=device, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(batch, nkv, max_len, hd, device=device, dtype=dtype))

    def forward(self, x, pos, cos, sin, mask):
        b = x.shape[0]
        y = self.input_norm(x)
        q = self.q_norm(self.q_proj(y).view(b, 1, self.nh, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(y).view(b, 1, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(y).view(b, 1, self.nkv, self.hd).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        a = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask, enable_gqa=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, 1, -1))
        y = self.post_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Decoder(nn.Module):
    def __init__(self, c, batch, max_len, device, dtype):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c, batch, max_len, device, dtype) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        hd = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, device=device).float() / hd))
        self.register_buffer("inv_freq", inv)
        self.register_buffer("positions", torch.arange(max_len, device=device))

    def forward(self, tokens, pos):
        x = self.embed(tokens)
        ang = pos.float()[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        mask = self.positions[None, None, None, :] <= pos
        for layer in self.layers:
            x = layer(x, pos, cos, sin, mask)
        return self.lm_head(self.norm(x)).argmax(-1)


def build(layers=4, batch=8, max_len=1024, device="cuda", dtype=torch.bfloat16, hidden=1024):
    torch.manual_seed(0)
    model = Decoder(qwen3_shape(layers, hidden), batch, max_len, device, dtype).to(device, dtype).eval()
    tokens = torch.randint(0, model.c["vocab_size"], (batch, 1), device=device)
    pos = torch.full((1,), 128, device=device, dtype=torch.long)
    return model, tokens, pos


def capture(model, tokens, pos):
    """Returns a CUDA graph of one decode step (reads tokens/pos, writes next tokens)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(3):
            model(tokens, pos)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = model(tokens, pos)
    return graph, out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--layers", type=int, default=4)
    args = p.parse_args()
    model, tokens, pos = build(args.layers)
    graph, out = capture(model, tokens, pos)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        graph.replay()
        tokens.copy_(out)
        pos.add_(1)
        torch.cuda.synchronize()  # as a serving loop does when it reads the next tokens
    dt = (time.perf_counter() - t0) / args.steps
    with torch.no_grad():
        eager = model(tokens, pos)
    graph.replay()
    torch.cuda.synchronize()
    same = bool((eager == out).all())
    print(
        json.dumps({"steps": args.steps, "layers": args.layers, "ms_per_step": dt * 1e3, "graph_matches_eager": same})
    )


if __name__ == "__main__":
    main()
