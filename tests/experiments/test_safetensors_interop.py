#!/usr/bin/python3
"""tests/experiments/test_safetensors_interop.py HEED: weights in and out.

The safetensors format is a JSON header and raw little-endian tensors, so
this test reads and writes it with json + numpy, as any other program would
(Python's safetensors package is not in Debian 12):
  - `heed export` of a trained run: every tensor equals the checkpoint's;
  - weights written here (float64, scaled) start a heed run with --init-from:
    its first logged loss equals the loss numpy computes with them;
  - a damaged file given to --init-from is refused, naming it, with no log.
Debian's Python runs it (h5py, numpy).
"""
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402

HEED = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="heed-st-")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def heed(*args):
    return subprocess.run([HEED, *args], capture_output=True, text=True, timeout=300, cwd=TMP)


def read_safetensors(path):
    return safetensors_np.read(path)


def write_safetensors(path, tensors):
    safetensors_np.write(path, tensors)


def sine_mse(w, n=256):
    x = np.linspace(-np.pi, np.pi, n).reshape(n, 1).astype(np.float32).astype(np.float64)
    y = np.sin(x).astype(np.float32).astype(np.float64)
    h = np.tanh(x @ w["l1.weight"].T + w["l1.bias"])
    h = np.tanh(h @ w["l2.weight"].T + w["l2.bias"])
    return float(np.mean((h @ w["l3.weight"].T + w["l3.bias"] - y) ** 2))


try:
    r = heed("run", "sine", "--steps", "200", "--out", "s.h5")
    check(r.returncode == 0, f"heed run sine: exit {r.returncode} {r.stderr[-300:]}")
    r = heed("export", "s.ckpt.h5", "-o", "s.safetensors")
    check(r.returncode == 0, f"heed export: exit {r.returncode} {r.stderr[-300:]}")
    tensors, meta = read_safetensors(os.path.join(TMP, "s.safetensors"))
    with h5py.File(os.path.join(TMP, "s.ckpt.h5"), "r") as f:
        same = all(np.array_equal(a, f["tensors/model/" + k][()]) for k, a in tensors.items())
        count = sum(1 for k in f["tensors/model"])
    check(same and len(tensors) == count == 6, f"heed export: all {len(tensors)} tensors equal the checkpoint's")
    check(meta.get("heed_experiment") == "sine" and meta.get("heed_step") == "200",
          f"heed export: metadata names the experiment and step ({meta.get('heed_experiment')}, {meta.get('heed_step')})")

    # float64 weights from elsewhere (here: the trained ones, scaled) start a new run.
    mine = {k: a.astype(np.float64) * 0.9 for k, a in tensors.items()}
    write_safetensors(os.path.join(TMP, "mine.safetensors"), mine)
    r = heed("run", "sine", "--init-from", "mine.safetensors", "--steps", "2", "--out", "i.h5")
    check(r.returncode in (0, 1), f"heed run sine --init-from: exit {r.returncode} {r.stderr[-300:]}")
    with h5py.File(os.path.join(TMP, "i.h5"), "r") as f:
        first = float(f["metrics/train_loss"][0, 1])
    expect = sine_mse({k: a.astype(np.float32).astype(np.float64) for k, a in mine.items()})
    print(f"     first loss from the given weights: heed {first:.8f}, numpy (float64) {expect:.8f}")
    check(abs(first - expect) <= 1e-5 * abs(expect), "--init-from: heed's first loss equals numpy's within 1e-5")

    # A GPT under a plain PyTorch GPT's names (nanoGPT: q, k, v fused into c_attn), and back.
    with open(os.path.join(TMP, "t.txt"), "w") as f:
        f.write("In the beginning God created the heaven and the earth. " * 100)
    lm = ["run", "charlm", "--text", "t.txt", "--layers", "2", "--heads", "2", "--width", "16", "--context", "16",
          "--batch", "4", "--eval-every", "10", "--eval-batches", "1"]
    r = heed(*lm, "--steps", "10", "--out", "lm.h5")
    check(r.returncode == 0, f"heed run charlm: exit {r.returncode} {r.stderr[-300:]}")
    r = heed("export", "lm.ckpt.h5", "--names", "nanogpt", "-o", "nano.safetensors")
    check(r.returncode == 0, f"heed export --names nanogpt: exit {r.returncode} {r.stderr[-300:]}")
    nano, _ = read_safetensors(os.path.join(TMP, "nano.safetensors"))
    with h5py.File(os.path.join(TMP, "lm.ckpt.h5"), "r") as f:
        m = lambda k: f["tensors/model/" + k][()]
        fused = np.concatenate([m("blocks.1.attn.q_proj.weight"), m("blocks.1.attn.k_proj.weight"),
                                m("blocks.1.attn.v_proj.weight")])
        check(np.array_equal(nano["transformer.h.1.attn.c_attn.weight"], fused),
              "export --names nanogpt: c_attn is q, k and v stacked")
        check(np.array_equal(nano["transformer.h.0.mlp.c_fc.weight"], m("blocks.0.ffn.fc1.weight")) and
              np.array_equal(nano["transformer.wte.weight"], m("wte.weight")), "... and the other names map one to one")
    runs = {}
    for name in ("nano", "lm"):
        src = "nano.safetensors" if name == "nano" else "lmh.safetensors"
        if name == "lm":
            heed("export", "lm.ckpt.h5", "-o", "lmh.safetensors")
        r = heed(*lm, "--steps", "2", "--init-from", src, "--out", f"from_{name}.h5")
        check(r.returncode == 0, f"charlm --init-from {src}: exit {r.returncode} {r.stderr[-300:]}")
        with h5py.File(os.path.join(TMP, f"from_{name}.h5"), "r") as f:
            runs[name] = f["metrics/train_loss"][:, 1]
    check(np.array_equal(runs["nano"], runs["lm"]), "a GPT starts the same from nanoGPT's names as from heed's")

    bad = os.path.join(TMP, "bad.safetensors")
    with open(os.path.join(TMP, "mine.safetensors"), "rb") as f:
        open(bad, "wb").write(f.read()[:40])
    r = heed("run", "sine", "--init-from", "bad.safetensors", "--out", "b.h5")
    check(r.returncode == 1 and "bad.safetensors" in r.stderr and "terminate" not in r.stderr,
          f"a damaged --init-from file is refused naming it: {r.stderr.strip()}")
    check(not os.path.exists(os.path.join(TMP, "b.h5")), "... and no log is written")
    r = heed("export", "s.ckpt.h5", "--model", "nope")
    check(r.returncode == 2 and "no model 'nope'" in r.stderr, f"export --model of a missing model: {r.stderr.strip()}")

    # A run of several models (shapes): --init-from fills the one it trains
    # (it was refused for every shapes run: "no model registered as 'model'").
    sh = ["run", "shapes", "--epochs", "1", "--train", "40", "--test", "20", "--batch", "20", "--threads", "1"]
    r = heed(*sh, "--model", "attention", "--out", "sh.h5")
    check(r.returncode == 0, f"shapes --model attention: exit {r.returncode} {r.stderr[-300:]}")
    r = heed("export", "sh.ckpt.h5", "--model", "attention", "-o", "att.safetensors")
    check(r.returncode == 0, f"export --model attention: exit {r.returncode} {r.stderr[-300:]}")
    r = heed(*sh, "--model", "attention", "--init-from", "att.safetensors", "--out", "sh2.h5")
    check(r.returncode == 0 and "model initialised from att.safetensors" in r.stdout,
          f"shapes --model attention --init-from its export: exit {r.returncode} {r.stderr[-300:]}")
    r = heed(*sh, "--model", "both", "--init-from", "att.safetensors", "--out", "sh3.h5")
    check(r.returncode == 2 and "one model" in r.stderr and "cnn, attention" in r.stderr,
          f"--init-from with two models is refused naming them: {r.stderr.strip()}")
finally:
    shutil.rmtree(TMP, ignore_errors=True)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
