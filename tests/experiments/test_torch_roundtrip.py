#!/usr/bin/python3
"""tests/experiments/test_torch_roundtrip.py PROBE HEED: the same losses and
gradients as PyTorch, from weights that cross between the two as safetensors.

PyTorch here is plain torch.nn code written from the architectures' own
descriptions, not from heed's code:
  - the toy shapes attention model (Conv1d(1,64,5) ReLU Conv1d(64,64,5) ReLU
    SelfAttention(64,64,64) Conv1d(64,64,5) ReLU Conv1d(64,1,5); 54,081
    parameters; the attention's q, k, v are 1x1 convolutions without bias and
    its scores are not scaled), loss MSE;
  - a small GPT in nanoGPT's layout (transformer.wte, wpe, h.<i>.ln_1,
    attn.c_attn with q, k and v fused, attn.c_proj, ln_2, mlp.c_fc,
    mlp.c_proj, ln_f, and an lm_head without bias; nanoGPT's causal-mask
    buffers attn.bias are written too, as nanoGPT's state_dict has them),
    loss mean cross-entropy; once with an lm_head of its own (heed's GPT by
    default, and charlm's) and once tied to wte as nanoGPT ties them (the
    state dict then lists the one matrix under both names).
PyTorch writes each model's float32 weights and a batch (json + numpy: an
8-byte little-endian header length, the JSON header, the raw little-endian
data; Python's safetensors package is not in Debian 12). heed_torch_probe
loads them with heed, runs forward and backward, and writes the loss and
every parameter's gradient under PyTorch's names. The criteria, against
PyTorch's float64 run of the same float32 weights and batch:
  loss:      |loss_heed - loss_64| <= 1e-5 |loss_64|
  gradients: for every parameter tensor,
             max |g_heed - g_64| <= 1e-4 max(1, max |g_64|)
PyTorch's own float32 run is measured the same way, for context.

Then heed trains a small charlm, exports it with --names nanogpt, and
PyTorch's GPT, loading that file, computes the validation loss (and the
gradients) heed computes from its checkpoint on the same tokens: the
windows w = 0, 1, ... of `context` characters that tile the validation text
(the last 10% of the corpus, as heed splits it), each with its next-character
targets.

Each criterion is also shown to fail: a perturbed weight on one side breaks
the loss and the gradient comparisons.

Fails (it does not skip) when torch cannot be imported: the test needs
Debian's python3-torch, which ./heed test installs.
"""
import copy
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402

# heed's runs and PyTorch share the cores with the rest of the suite: idle
# OpenMP workers sleep instead of spinning (a spinning pool made the charlm run
# 30x slower on a loaded machine). ./heed test sets the same.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"FAIL torch cannot be imported ({e}): this test needs PyTorch; install python3-torch "
          f"(apt-get install python3-torch; ./heed test installs it) and run it with /usr/bin/python3", flush=True)
    sys.exit(1)
import h5py

PROBE, HEED = sys.argv[1], sys.argv[2]
TMP = tempfile.mkdtemp(prefix="heed-torch-")
LOSS_TOL, GRAD_TOL = 1e-5, 1e-4
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def path(name):
    return os.path.join(TMP, name)


def read_safetensors(p):
    return safetensors_np.read(p)[0]


def write_safetensors(p, tensors):
    safetensors_np.write(p, tensors)


def numpy_state(model):
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


# ---- the models, in PyTorch ---------------------------------------------------------

class SelfAttention(nn.Module):
    """The toy model's attention: x [N, C, T] -> V softmax_keys(Q^T K)^T [N, O, T], unscaled."""

    def __init__(self, c_in, c_out, c_key):
        super().__init__()
        self.conv_q = nn.Conv1d(c_in, c_key, 1, bias=False)
        self.conv_k = nn.Conv1d(c_in, c_key, 1, bias=False)
        self.conv_v = nn.Conv1d(c_in, c_out, 1, bias=False)

    def forward(self, x):
        q, k, v = self.conv_q(x), self.conv_k(x), self.conv_v(x)  # [N, K, T], [N, K, T], [N, O, T]
        a = torch.softmax(q.transpose(1, 2) @ k, dim=-1)           # [N, T(query), T(key)]
        return v @ a.transpose(1, 2)                               # [N, O, T]


def shapes_attention():
    def conv(i, o):
        return nn.Conv1d(i, o, 5, padding=2)
    return nn.Sequential(conv(1, 64), nn.ReLU(), conv(64, 64), nn.ReLU(), SelfAttention(64, 64, 64),
                         conv(64, 64), nn.ReLU(), conv(64, 1))


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, context):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)  # rows: q, k, v
        self.c_proj = nn.Linear(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

    def forward(self, x):
        N, T, D = x.shape
        H = self.heads
        q, k, v = self.c_attn(x).split(D, dim=2)
        q, k, v = (t.view(N, T, H, D // H).transpose(1, 2) for t in (q, k, v))  # [N, H, T, D/H]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(N, T, D))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))  # exact (erf) GELU


class Block(nn.Module):
    def __init__(self, d, heads, context):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, context)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, context, tied=False):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d), wpe=nn.Embedding(context, d),
            h=nn.ModuleList([Block(d, heads, context) for _ in range(layers)]), ln_f=nn.LayerNorm(d)))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        if tied:  # nanoGPT's weight tying (its default)
            self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        T = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))  # [N, T, V]


def mse(model, x, y):
    return F.mse_loss(model(x), y)


def lm_loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def reference(model, loss_fn, x, y, dtype):
    """Loss and gradients (float64 numpy) of a copy of model in dtype."""
    m = copy.deepcopy(model).to(dtype)
    m.zero_grad()

    def tensor(a):  # token ids stay int64
        return torch.from_numpy(a).to(dtype) if a.dtype != np.int64 else torch.from_numpy(a)
    loss = loss_fn(m, tensor(x), tensor(y))
    loss.backward()
    grads = {k: p.grad.detach().double().numpy() for k, p in m.named_parameters()}
    return float(loss.item()), grads


# ---- comparison ---------------------------------------------------------------------

def errors(loss, grads, ref):
    """Relative loss error, and per tensor max|g - g64| / max(1, max|g64|) (worst first)."""
    loss64, g64 = ref
    rel = abs(loss - loss64) / abs(loss64)
    per = []
    for k, r in g64.items():
        g = grads.get(k)
        if g is None or g.shape != r.shape:
            per.append((math.inf, k, math.inf, float(np.abs(r).max())))
            continue
        diff = float(np.abs(g.astype(np.float64) - r).max())
        top = float(np.abs(r).max())
        per.append((diff / max(1.0, top), k, diff, top))
    per.sort(reverse=True)
    return rel, per


def describe(per):
    e, k, diff, top = per[0]
    own = max(d / t if t > 0 else math.inf for _, _, d, t in per)
    return f"{e:.3g} ({k}: max abs diff {diff:.3g}, max|g64| {top:.3g}; worst max|g - g64| / max|g64| {own:.3g})"


def probe(model, weights, batch, out, *extra):
    r = subprocess.run([PROBE, model, *extra, weights, batch, out], capture_output=True, text=True, timeout=280)
    if r.returncode != 0:
        check(False, f"heed_torch_probe {model} {os.path.basename(weights)}: exit {r.returncode} {r.stderr[-500:]}")
        return None
    t = read_safetensors(out)
    return float(t["loss"]), {k[5:]: v for k, v in t.items() if k.startswith("grad.")}


def compare(title, model, weights, batch, ref64, ref32, perturbed, *extra):
    """heed's loss and gradients from weights against PyTorch's float64 run; then
    perturbed (a copy of the weights with one change) must break both criteria."""
    got = probe(model, weights, batch, path(title + ".out.safetensors"), *extra)
    if got is None:
        return
    loss, grads = got
    check(set(grads) == set(ref64[1]),
          f"{title}: heed's gradients carry PyTorch's {len(ref64[1])} parameter names "
          f"(missing {sorted(set(ref64[1]) - set(grads))}, extra {sorted(set(grads) - set(ref64[1]))})")
    rel, per = errors(loss, grads, ref64)
    rel32, per32 = errors(ref32[0], ref32[1], ref64)
    print(f"     {title}: loss heed {loss:.9g}, PyTorch float64 {ref64[0]:.9g}, float32 {ref32[0]:.9g}")
    print(f"     {title}: loss relative error: heed {rel:.3g}, PyTorch float32 {rel32:.3g}")
    print(f"     {title}: worst gradient error, max|g - g64| / max(1, max|g64|): heed {describe(per)}; "
          f"PyTorch float32 {describe(per32)}")
    check(rel <= LOSS_TOL, f"{title}: loss within {LOSS_TOL:g} relative of PyTorch's float64 ({rel:.3g})")
    check(per[0][0] <= GRAD_TOL,
          f"{title}: every gradient within {GRAD_TOL:g} max(1, max|g64|) of PyTorch's float64 ({per[0][0]:.3g})")

    names, change = perturbed
    bad = {k: v.copy() for k, v in read_safetensors(weights).items()}
    for name in names:
        change(bad[name])
    write_safetensors(path(title + ".perturbed.safetensors"), bad)
    got = probe(model, path(title + ".perturbed.safetensors"), batch, path(title + ".perturbed.out.safetensors"),
                *extra)
    if got is None:
        return
    prel, pper = errors(got[0], got[1], ref64)
    check(prel > LOSS_TOL and pper[0][0] > GRAD_TOL,
          f"{title}: with one weight of {' = '.join(names)} perturbed the comparison fails "
          f"(loss {prel:.3g} > {LOSS_TOL:g}, gradients {pper[0][0]:.3g} > {GRAD_TOL:g})")


# ---- data ---------------------------------------------------------------------------

def shapes_batch(rng, n, length=100):
    """Samples of the toy task (two triangles, two boxes; targets average each
    pair's heights), the input standardised over the batch."""
    t = np.arange(length, dtype=np.float64)
    xs, ys = [], []
    while len(xs) < n:
        c = rng.uniform(5.5, length - 5.5, 4)
        h = rng.uniform(1, 25, 4)
        w = rng.uniform(5, 11, 4)
        order = np.argsort(c)
        if np.any(c[order][1:] - w[order][1:] / 2 - (c[order][:-1] + w[order][:-1] / 2) < 2):
            continue  # shapes overlap or touch: draw again

        def render(heights):
            tri = [np.maximum(0, hh - np.maximum(0, np.abs(t - cc) - 0.5) * 2 * hh / ww)
                   for cc, hh, ww in zip(c[:2], heights[:2], w[:2])]
            box = [np.where(np.abs(t - cc) < ww / 2, hh, 0.0) for cc, hh, ww in zip(c[2:], heights[2:], w[2:])]
            return np.max(tri + box, axis=0)
        xs.append(render(h) + rng.uniform(-0.15, 0.15, length))
        ys.append(render(h[[1, 0, 3, 2]] / 2 + h / 2) + rng.uniform(-0.15, 0.15, length))
    x = np.array(xs)[:, None, :]
    x = (x - x.mean()) / x.std(ddof=1)
    return x.astype(np.float32), np.array(ys)[:, None, :].astype(np.float32)


def corpus(chars=24000):
    """A deterministic text of sentences over a small vocabulary."""
    words = ("and the of to in that he shall unto for his i they be is him not them it with all thou was "
             "which my lord their have will from ye as were upon house land day king people god son men "
             "went came said out before against hand").split()
    r = random.Random(7)
    out = []
    while sum(map(len, out)) < chars:
        s = " ".join(r.choice(words) for _ in range(r.randint(4, 12)))
        out.append(s[0].upper() + s[1:] + r.choice([".", ".", ",", ";", ":"]) + ("\n" if r.random() < 0.2 else " "))
    return "".join(out)


def heed(*args):
    return subprocess.run([HEED, *args], capture_output=True, text=True, timeout=280, cwd=TMP)


# ---- the tests ----------------------------------------------------------------------

start = time.time()
try:
    # 1. The toy shapes attention model.
    torch.manual_seed(0)
    model = shapes_attention()
    check(sum(p.numel() for p in model.parameters()) == 54081, "PyTorch's shapes attention model has 54,081 parameters")
    x, y = shapes_batch(np.random.default_rng(0), 8)
    write_safetensors(path("shapes.safetensors"), numpy_state(model))
    write_safetensors(path("shapes.batch.safetensors"), {"x": x, "y": y})
    ref64, ref32 = (reference(model, mse, x, y, dt) for dt in (torch.float64, torch.float32))

    def nudge(a):  # a key weight: the scores x^T Wq^T Wk x change, the loss only a little
        a.flat[0] += 1.0
    compare("shapes attention", "shapes-attention", path("shapes.safetensors"), path("shapes.batch.safetensors"),
            ref64, ref32, (["4.conv_k.weight"], nudge))

    print(f"     ({time.time() - start:.1f} s)")

    # 2. A small GPT under nanoGPT's names.
    V, D, L, H, T, N = 20, 32, 2, 4, 16, 4
    torch.manual_seed(1)
    model = GPT(V, D, L, H, T)
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, V, (N, T), generator=g).numpy()
    y = torch.randint(0, V, (N, T), generator=g).numpy()
    state = numpy_state(model)
    check("transformer.h.0.attn.bias" in state and "lm_head.weight" in state,
          f"PyTorch's GPT state dict: {len(state)} tensors in nanoGPT's layout (mask buffers, untied lm_head)")
    write_safetensors(path("gpt.safetensors"), state)
    write_safetensors(path("gpt.batch.safetensors"), {"x": x, "y": y})
    ref64, ref32 = (reference(model, lm_loss, x, y, dt) for dt in (torch.float64, torch.float32))

    def nudge_key(a):  # a key row of c_attn: q, k and v must be split where PyTorch splits them
        a[D + 3, 5] += 1.0
    compare("gpt", "gpt", path("gpt.safetensors"), path("gpt.batch.safetensors"), ref64, ref32,
            (["transformer.h.1.attn.c_attn.weight"], nudge_key), "--heads", str(H))
    print(f"     ({time.time() - start:.1f} s)")

    # 2b. The same GPT with nanoGPT's weight tying: its state dict lists the one
    # matrix as transformer.wte.weight and lm_head.weight; its gradient gets both uses.
    torch.manual_seed(3)
    model = GPT(V, D, L, H, T, tied=True)
    state = numpy_state(model)
    check(np.array_equal(state["lm_head.weight"], state["transformer.wte.weight"]) and
          "lm_head.weight" not in dict(model.named_parameters()),
          "PyTorch's tied GPT: lm_head.weight and transformer.wte.weight are one parameter")
    write_safetensors(path("gpt_tied.safetensors"), state)
    ref64, ref32 = (reference(model, lm_loss, x, y, dt) for dt in (torch.float64, torch.float32))

    def nudge_embedding(a):
        a[int(x[0, 0]), 3] += 1.0
    compare("gpt tied", "gpt", path("gpt_tied.safetensors"), path("gpt.batch.safetensors"), ref64, ref32,
            (["transformer.wte.weight", "lm_head.weight"], nudge_embedding), "--heads", str(H), "--tied")
    state["lm_head.weight"] = state["lm_head.weight"] * 2
    write_safetensors(path("gpt_untied.safetensors"), state)
    r = subprocess.run([PROBE, "gpt", "--heads", str(H), "--tied", path("gpt_untied.safetensors"),
                        path("gpt.batch.safetensors"), path("gpt_untied.out.safetensors")],
                       capture_output=True, text=True, timeout=280)
    check(r.returncode == 1 and "tied" in r.stderr and "lm_head.weight" in r.stderr,
          f"a tied GPT refuses an lm_head.weight that differs from wte.weight: {r.stderr.strip()}")

    print(f"     ({time.time() - start:.1f} s)")

    # 3. A trained charlm, exported under nanoGPT's names, in PyTorch.
    with open(path("corpus.txt"), "w") as f:
        f.write(corpus())
    L, H, D, T = 2, 4, 32, 16
    r = heed("run", "charlm", "--text", "corpus.txt", "--layers", str(L), "--heads", str(H), "--width", str(D),
             "--context", str(T), "--batch", "8", "--steps", "100", "--eval-every", "100", "--eval-batches", "2",
             "--out", "lm.h5")
    check(r.returncode == 0, f"heed run charlm (100 steps): exit {r.returncode} {r.stderr[-300:]}")
    r = heed("export", "lm.ckpt.h5", "--names", "nanogpt", "-o", "lm.safetensors")
    check(r.returncode == 0, f"heed export --names nanogpt: exit {r.returncode} {r.stderr[-300:]}")
    with h5py.File(path("lm.ckpt.h5"), "r") as f:
        codepoints = f["tensors/tokenizer/codepoints"][()]
    with h5py.File(path("lm.h5"), "r") as f:
        logged_val = float(f["metrics/val_loss"][-1, 1])  # on heed's own random windows, for context
    print(f"     (charlm trained and exported: {time.time() - start:.1f} s)")
    ids_of = {chr(c): i for i, c in enumerate(codepoints)}
    text = open(path("corpus.txt")).read()
    ids = np.array([ids_of[ch] for ch in text], dtype=np.int64)
    val = ids[int(len(ids) * 0.9):]  # heed's split: the first 90% train, the rest validation
    W = (len(val) - 1) // T
    x = np.stack([val[w * T:(w + 1) * T] for w in range(W)])
    y = np.stack([val[w * T + 1:(w + 1) * T + 1] for w in range(W)])
    write_safetensors(path("val.batch.safetensors"), {"x": x, "y": y})

    exported = read_safetensors(path("lm.safetensors"))
    lm = GPT(len(codepoints), D, L, H, T)
    missing, unexpected = lm.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in exported.items()},
                                             strict=False)
    check(not unexpected and all(k.endswith(".attn.bias") for k in missing),
          f"PyTorch's GPT loads heed's export: {len(exported)} tensors, none unexpected, "
          f"only the mask buffers missing ({missing})")
    ref64, ref32 = (reference(lm, lm_loss, x, y, dt) for dt in (torch.float64, torch.float32))
    heed_ck = probe("gpt", path("lm.ckpt.h5"), path("val.batch.safetensors"), path("val.ckpt.out.safetensors"),
                    "--heads", str(H))
    heed_ex = probe("gpt", path("lm.safetensors"), path("val.batch.safetensors"), path("val.export.out.safetensors"),
                    "--heads", str(H))
    if heed_ck and heed_ex:
        rel, per = errors(heed_ck[0], heed_ck[1], ref64)
        rel32, per32 = errors(ref32[0], ref32[1], ref64)
        print(f"     charlm: validation loss on {W} x {T} tokens: heed (checkpoint) {heed_ck[0]:.9g}, "
              f"PyTorch (export) float64 {ref64[0]:.9g}, float32 {ref32[0]:.9g}; the run's own last "
              f"val_loss {logged_val:.6g}")
        print(f"     charlm: loss relative error: heed {rel:.3g}, PyTorch float32 {rel32:.3g}")
        print(f"     charlm: worst gradient error: heed {describe(per)}; PyTorch float32 {describe(per32)}")
        check(rel <= LOSS_TOL,
              f"charlm: PyTorch's validation loss from the export equals heed's within {LOSS_TOL:g} ({rel:.3g})")
        check(per[0][0] <= GRAD_TOL, f"charlm: ... and so do all {len(per)} gradients within {GRAD_TOL:g} "
                                     f"max(1, max|g64|) ({per[0][0]:.3g})")
        check(heed_ex[0] == heed_ck[0],
              "charlm: heed's loss from the exported file equals its loss from the checkpoint, bit for bit")
        bad = {k: torch.from_numpy(v.copy()) for k, v in exported.items()}
        bad["transformer.h.0.mlp.c_fc.weight"][0, 0] += 0.5
        lm.load_state_dict(bad, strict=False)
        bad64 = reference(lm, lm_loss, x, y, torch.float64)[0]
        brel = abs(heed_ck[0] - bad64) / abs(bad64)
        check(brel > LOSS_TOL,
              f"charlm: with one weight of PyTorch's copy perturbed the loss comparison fails ({brel:.3g})")
finally:
    shutil.rmtree(TMP, ignore_errors=True)

print(f"{len(failures)} failure(s) in {time.time() - start:.1f} s")
sys.exit(1 if failures else 0)
