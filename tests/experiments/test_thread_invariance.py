#!/usr/bin/python3
"""tests/experiments/test_thread_invariance.py HEED: every bundled experiment
logs the same numbers on 1 and 2 threads, bit for bit (and the GPT
experiments on AVX2 and AVX-512, where this CPU can run both).

Each experiment runs a few steps twice, with --threads 1 and --threads 2,
and every floating-point dataset of the two HDF5 logs must be equal (the
wall-clock column of metric rows, and throughput metrics, excepted). This
is what the README promises for --threads, and what a resume on another
thread count relies on. Also in bf16 where the CPU has it, and on the AVX2
path on an AVX-512 CPU. Before the convolutions' weight gradients were cut
by shape, shapes and timeseries parted at step 6. Debian's Python runs it
(h5py, numpy).

With two programs, `test_thread_invariance.py OLD_HEED NEW_HEED`, it compares
two builds instead (2 threads each, the same runs, charlm for 40 steps): a
change meant to leave every number alone (a faster kernel, a fused pass)
must pass it against the build before.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

BUILDS = sys.argv[1:3] if len(sys.argv) > 2 else None  # [old, new]: compare two builds
HEED = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="heed-threads-")
RUNS = [
    ("shapes", ["--train", "800", "--test", "40", "--epochs", "1", "--batch", "100"]),
    ("timeseries", ["--steps", "12"]),
    ("crossattn", ["--steps", "12"]),
    ("charlm", ["--steps", "12"]),
    ("copy", ["--steps", "12"]),
    # bf16 products (where the CPU has them): slabs by shape too.
    ("shapes", ["--train", "800", "--test", "40", "--epochs", "1", "--batch", "100", "--precision", "bf16"]),
    ("charlm", ["--steps", "12", "--precision", "bf16"]),
]
# On an AVX-512 CPU, the AVX2 code path as well (HEED_CPU_ISA caps heed's
# kernels and oneDNN's): the toy models' convolutions and a GPT.
with open("/proc/cpuinfo") as f:
    AVX512 = " avx512f" in f.read()
if AVX512 and "HEED_CPU_ISA" not in os.environ:
    RUNS += [("shapes", ["--train", "800", "--test", "40", "--epochs", "1", "--batch", "100"], "avx2"),
             ("charlm", ["--steps", "12"], "avx2")]
    # And the AVX2 path against the AVX-512 one, 2 threads each: float32
    # arithmetic is all heed's own (its GEMM, convolutions on it, Winograd,
    # fused attention, row kernels), so every experiment must log the same
    # bits on both, as an AVX2 machine's run would.
    RUNS += [(name, args, "avx2-vs-avx512") for name, args in
             [("shapes", ["--train", "800", "--test", "40", "--epochs", "1", "--batch", "100"]),
              ("timeseries", ["--steps", "12"]), ("charlm", ["--steps", "12"]), ("copy", ["--steps", "12"]),
              ("crossattn", ["--steps", "12"])]]
if BUILDS:  # a longer GPT run; the ISA runs are the thread test's
    RUNS = [("charlm", ["--steps", "40"]) if r == ("charlm", ["--steps", "12"]) else r for r in RUNS if len(r) == 2]
RUNS = [r if len(r) == 3 else (*r, None) for r in RUNS]
# Under AddressSanitizer (the sanitized suite, ~6x slower; its GEMM ~50x)
# the float32 runs of a convolution model and of a GPT only, the GPT's final
# evaluation over 4 batches instead of 32 (it took half of each charlm run,
# about 60 s at 2 threads on a Zen 3); the Release suite runs them all.
if "ASAN_OPTIONS" in os.environ:
    RUNS = [(n, a + ["--eval-batches", "4"] if n == "charlm" else a, i) for n, a, i in RUNS
            if n in ("shapes", "charlm") and "bf16" not in a and i is None]
WHAT = f"{BUILDS[0]} and {BUILDS[1]}" if BUILDS else "1 and 2 threads"
SKIP = ("tokens_per_second", "step_seconds", "samples_per_second")


def datasets(group, prefix=""):
    for key in group:
        obj = group[key]
        if isinstance(obj, h5py.Group):
            yield from datasets(obj, prefix + "/" + key)
        else:
            yield prefix + "/" + key, obj


def numbers(ds):
    x = ds[()]
    if not hasattr(x, "dtype") or x.dtype.kind != "f":
        return None
    columns = ds.attrs.get("columns", b"")
    if isinstance(columns, bytes):
        columns = columns.decode()
    if x.ndim == 2 and "wall_seconds" in columns:
        x = x[:, [i for i, c in enumerate(columns.split(", ")) if c != "wall_seconds"]]
    return x


failures = []
for i, (name, args, isa) in enumerate(RUNS):
    logs = []
    across = isa == "avx2-vs-avx512"
    label = name + (" bf16" if "bf16" in args else "") + \
        (" on AVX2 and AVX-512" if across else f" HEED_CPU_ISA={isa}" if isa else "")
    env = dict(os.environ, HEED_CPU_ISA=isa) if isa and not across else None
    pairs = [("2", BUILDS[0]), ("2", BUILDS[1])] if BUILDS else \
        [("2", HEED), ("2", HEED)] if across else [("1", HEED), ("2", HEED)]
    for threads, program in pairs:
        if across:
            env = dict(os.environ, HEED_CPU_ISA="avx2" if logs else "avx512")
        out = os.path.join(TMP, f"{i}-{name}-{len(logs)}.h5")
        r = subprocess.run([program, "run", name, *args, "--threads", threads, "--out", out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        if r.returncode != 0 and "bf16" in args and "bf16 needs a CPU with" in r.stdout:
            print(f"{label}: not run, this CPU has no native bf16 ({r.stdout.strip().splitlines()[-1][:120]})")
            break
        if r.returncode != 0:
            failures.append(f"{program} run {name} --threads {threads} exited {r.returncode}:\n{r.stdout[-2000:]}")
            break
        logs.append(out)
    if len(logs) != 2:
        continue
    with h5py.File(logs[0], "r") as a, h5py.File(logs[1], "r") as b:
        compared = 0
        for path, ds in datasets(a):
            if any(s in path for s in SKIP):
                continue
            x = numbers(ds)
            if x is None:
                continue
            if path not in b:
                failures.append(f"{label}: {path} is in the first log only ({WHAT})")
                continue
            y = numbers(b[path])
            compared += 1
            if x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
                diff = "shapes " + str(x.shape) + " vs " + str(y.shape) if x.shape != y.shape else \
                    f"max difference {np.nanmax(np.abs(x - y)):.3g}"
                failures.append(f"{label}: {path} differs between {'AVX2 and AVX-512' if across else WHAT} ({diff})")
        if compared < 3:
            failures.append(f"{label}: only {compared} datasets compared; the logs' layout changed?")
        print(f"{label}: {compared} datasets compared")

shutil.rmtree(TMP, ignore_errors=True)
if failures:
    print("FAILED:\n" + "\n".join(failures))
    sys.exit(1)
print(f"every experiment logs the same bits: {WHAT}")
