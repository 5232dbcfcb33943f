#!/usr/bin/python3
"""The PyTorch peer of `heed bench`: the same workloads, shapes, optimisers and
thread count, timed the same way (median of N training steps after warm-up).

Prints one line per workload: RESULT <name> <median ms>. With --precision bf16
the forward and backward run under CPU autocast to bfloat16 (PyTorch's mixed
precision: bf16 matrix products, float32 weights and optimiser).
Needs Debian's python3-torch (run under /usr/bin/python3).
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    """The lectures' single-head layer: 1x1 projections, softmax over keys, unscaled."""

    def __init__(self, c_in, c_out, c_key):
        super().__init__()
        self.conv_q = nn.Conv1d(c_in, c_key, 1, bias=False)
        self.conv_k = nn.Conv1d(c_in, c_key, 1, bias=False)
        self.conv_v = nn.Conv1d(c_in, c_out, 1, bias=False)

    def forward(self, x):
        q, k, v = self.conv_q(x), self.conv_k(x), self.conv_v(x)
        a = torch.softmax(q.transpose(1, 2) @ k, dim=2)
        return (a @ v.transpose(1, 2)).transpose(1, 2)


def toy(attention):
    c = lambda i, o: nn.Conv1d(i, o, 5, padding=2)
    if attention:
        return nn.Sequential(c(1, 64), nn.ReLU(), c(64, 64), nn.ReLU(), SelfAttention(64, 64, 64),
                             c(64, 64), nn.ReLU(), c(64, 1))
    return nn.Sequential(c(1, 64), nn.ReLU(), c(64, 64), nn.ReLU(), c(64, 64), nn.ReLU(), c(64, 64), nn.ReLU(),
                         c(64, 1))


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.drop = nn.Dropout(DROPOUT)  # as heed's GPT: probabilities, both residual branches
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(n, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.h)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        y = (self.drop(att) @ v).transpose(1, 2).reshape(n, t, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, context):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.drop = nn.Dropout(DROPOUT)

    def forward(self, ids):
        x = self.drop(self.wte(ids) + self.wpe(torch.arange(ids.shape[1])))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


BF16 = False
DROPOUT = 0.0  # the GPTs' (heed bench --dropout)


def workloads():
    torch.manual_seed(1)
    for name, attention in (("toy-cnn", False), ("toy-attention", True)):
        m = toy(attention)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        x, y = torch.randn(100, 1, 100), torch.randn(100, 1, 100)

        def step(m=m, opt=opt, x=x, y=y):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
                loss = F.mse_loss(m(x).float(), y)
            loss.backward()
            opt.step()

        yield name, step
    # name, width, context, layers, heads, batch (nanogpt: nanoGPT's
    # character-level baseline, shakespeare_char, at batch 8).
    for name, d, t, layers, heads, batch in (("gpt-128", 128, 64, 4, 4, 12), ("gpt-256", 256, 256, 4, 4, 12),
                                             ("nanogpt", 384, 256, 6, 6, 8)):
        m = GPT(65, d, layers, heads, t)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)
        ids, tgt = torch.randint(0, 65, (batch, t)), torch.randint(0, 65, (batch, t))

        def step(m=m, opt=opt, ids=ids, tgt=tgt):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
                loss = F.cross_entropy(m(ids).view(-1, 65).float(), tgt.view(-1))
            loss.backward()
            opt.step()

        yield name, step


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--max-seconds", type=float, default=15.0,
                    help="per workload: stop measuring after this much time (at least 3 steps)")
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--dropout", type=float, default=0.0, help="dropout probability of the GPT workloads")
    a = ap.parse_args()
    global BF16, DROPOUT
    BF16 = a.precision == "bf16"
    DROPOUT = a.dropout
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {a.precision}, dropout {DROPOUT}", flush=True)
    for name, step in workloads():
        if a.only and name != a.only:
            continue
        ms = []
        for i in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            step()
            if i >= a.warmup:
                ms.append(1000 * (time.perf_counter() - t0))
            # Slow workloads (PyTorch's bf16 here takes seconds per step):
            # after 3 measured steps, stop once the time budget is spent.
            if len(ms) >= 3 and sum(ms) > 1000 * a.max_seconds:
                break
        print(f"RESULT {name} {statistics.median(ms):.3f}", flush=True)


if __name__ == "__main__":
    main()
