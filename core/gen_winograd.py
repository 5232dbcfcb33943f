#!/usr/bin/python3
"""How the Winograd F(m, r) matrices in core/cpu_conv_winograd.cpp were made.

A correlation of an r-tap filter g with n = m + r - 1 inputs d gives m
outputs: y[t] = sum_k g[k] d[t + k]. Toom-Cook: the linear convolution
s = g * x of an r-vector and an m-vector is the product of two polynomials,
so evaluating both at n points p_i (one of them "infinity", the leading
coefficient) and multiplying turns it into n products:
    s = Vn^-1 [(Vr g) . (Vm x)],  Vk[i][j] = p_i^j  (n x k).
The correlation is that map transposed (s = M(g) x, y = M(g)^T d):
    y = Vm^T [(Vr g) . (Vn^-T d)],  i.e.  A^T = Vm^T, G = Vr, B^T = Vn^-T.
Each row i of B^T is scaled by the lcm of its denominators and row i of G
divided by it, so the data transform B^T has integer entries.

Exact arithmetic (fractions); prints C++ constants and the float32 error of
a 64-channel sum against float64 on random data. Needs python3-numpy.
"""
from fractions import Fraction as Fr
from math import lcm
import sys

import numpy as np

M, R = 4, 5
POINTS = [Fr(0), Fr(1), Fr(-1), Fr(2), Fr(-2), Fr(1, 2), Fr(-1, 2)]  # and infinity
N = M + R - 1
assert len(POINTS) == N - 1


def vander(k):
    rows = [[p ** j for j in range(k)] for p in POINTS]
    rows.append([Fr(0)] * (k - 1) + [Fr(1)])  # infinity: the leading coefficient
    return rows


def inverse(a):
    n = len(a)
    aug = [row[:] + [Fr(int(i == j)) for j in range(n)] for i, row in enumerate(a)]
    for col in range(n):
        piv = next(r for r in range(col, n) if aug[r][col] != 0)
        aug[col], aug[piv] = aug[piv], aug[col]
        pv = aug[col][col]
        aug[col] = [v / pv for v in aug[col]]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                f = aug[r][col]
                aug[r] = [v - f * w for v, w in zip(aug[r], aug[col])]
    return [row[n:] for row in aug]


def transpose(a):
    return [list(r) for r in zip(*a)]


AT = transpose(vander(M))
G = vander(R)
BT = transpose(inverse(vander(N)))
for i in range(N):
    f = lcm(*[v.denominator for v in BT[i]])
    BT[i] = [v * f for v in BT[i]]
    G[i] = [v / f for v in G[i]]


def cpp(name, a):
    rows = ",\n    ".join("{" + ", ".join(f"{float(v)!r}f" for v in row) + "}" for row in a)
    return f"constexpr float {name}[{len(a)}][{len(a[0])}] = {{\n    {rows}}};"


print(cpp("kAT", AT))
print(cpp("kG", G))
print(cpp("kBT", BT))

# float32 check: 64 channels summed, as a convolution layer does.
f32 = np.float32
at, g, bt = (np.array([[float(v) for v in row] for row in a]) for a in (AT, G, BT))
rng = np.random.default_rng(0)
worst = 0.0
for _ in range(500):
    d = rng.standard_normal((64, N))
    w = rng.standard_normal((64, R)) * 0.1
    ref = np.array([sum((w[:, k] * d[:, t + k]).sum() for k in range(R)) for t in range(M)])
    u = (g.astype(f32) @ w.astype(f32).T).T
    v = (bt.astype(f32) @ d.astype(f32).T).T
    y = at.astype(f32) @ (u * v).sum(0, dtype=f32)
    worst = max(worst, np.abs(y - ref).max() / np.abs(ref).max())
print(f"// float32 error relative to the largest output: {worst:.2e}", file=sys.stderr)
