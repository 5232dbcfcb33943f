#!/usr/bin/python3
"""How the coefficients of fast::erf (core/fast_math.h) were found.

erf(x) ~ x P(x^2) / Q(x^2) on [0, 4], P of 6 terms, Q of 5 plus a leading 1.
First a linearised least-squares fit (x P - erf Q = 0, reweighted by 1/Q),
then a nonlinear fit of the true error under growing p-norms (2 .. 16), which
moves it towards the minimax error. Prints the coefficients and the error in
exact arithmetic and when evaluated in float32 as fast_math.h does.
Needs numpy and scipy (Debian: python3-numpy, python3-scipy).
"""
import numpy as np
from scipy.optimize import least_squares
from scipy.special import erf

X, N, NP, NQ = 4.0, 6000, 6, 5
k = np.arange(N)
x = (X / 2) * (1 - np.cos(np.pi * (k + 0.5) / N))  # Chebyshev points: dense at the ends
f, z = erf(x), x * x


def split(c):
    return c[:NP], np.concatenate([[1.0], c[NP:]])


def rational(c):
    p, q = split(c)
    return x * np.polyval(p[::-1], z) / np.polyval(q[::-1], z)


w = np.ones_like(x)
for _ in range(10):
    A = np.array([x * z**i for i in range(NP)] + [-f * z**j for j in range(1, NQ + 1)]).T * w[:, None]
    c, *_ = np.linalg.lstsq(A, f * w, rcond=None)
    w = 1 / np.abs(np.polyval(split(c)[1][::-1], z))
for pw in (2, 4, 8, 16):
    def residual(c, pw=pw):
        e = rational(c) - f
        return np.abs(e) ** (pw / 2) * np.sign(e)
    c = least_squares(residual, c, xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=20000).x
p, q = split(c)
print("P (x^0 ..):", [float(v) for v in p])
print("Q (x^0 ..):", [float(v) for v in q])
print("max error, exact arithmetic:", np.abs(rational(c) - f).max())

xs = np.linspace(-6, 6, 2000001).astype(np.float32)
ax = np.minimum(np.abs(xs), np.float32(X))
zz = ax * ax
P, Q = np.float32(p[-1]), np.float32(q[-1])
for v in p[-2::-1]:
    P = P * zz + np.float32(v)
for v in q[-2::-1]:
    Q = Q * zz + np.float32(v)
r = np.minimum(ax * P / Q, np.float32(1))
r = np.where(xs < 0, -r, r)
print("max absolute error in float32:", np.abs(r - erf(xs.astype(np.float64))).max())
