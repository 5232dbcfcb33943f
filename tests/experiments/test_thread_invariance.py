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

With `test_thread_invariance.py HEED --reference FILE` it compares the
float32 runs (and the bf16 ones where the CPU has AVX512-BF16), 2 threads,
with the digests of their logs kept in FILE (tests/experiments/
reference_bits.json): the bits logged on the CPU that wrote the file, so
the suite on any other CPU checks that it logs the same. A build with
another -march and another CPU's libraries' kernels (OpenBLAS picks by
CPU) is what this catches; AVX2 against AVX-512 within one build is the
runs above. `--write-reference FILE` writes the file instead: after a
change meant to move numbers, and said so in its commit.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import hashlib
import json

import h5py
import numpy as np

ARGS = sys.argv[1:]
REFERENCE = WRITE = None
if len(ARGS) == 3 and ARGS[1] in ("--reference", "--write-reference"):
    REFERENCE, WRITE = ARGS[2], ARGS[1] == "--write-reference"
    ARGS = ARGS[:1]
if len(ARGS) not in (1, 2) or any(a.startswith("--") for a in ARGS):
    sys.exit("usage: test_thread_invariance.py HEED [OTHER_HEED | --reference FILE | --write-reference FILE]")
BUILDS = ARGS[:2] if len(ARGS) == 2 else None  # [old, new]: compare two builds
HEED = ARGS[0]
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
if REFERENCE:  # this CPU's own path only; charlm's final evaluation over 4 batches (cheap under ASan too)
    RUNS = [(n, a + ["--eval-batches", "4"] if n == "charlm" else a) for n, a, *isa in RUNS if not isa]
if BUILDS:  # a longer GPT run; the ISA runs are the thread test's
    RUNS = [("charlm", ["--steps", "40"]) if r == ("charlm", ["--steps", "12"]) else r for r in RUNS if len(r) == 2]
RUNS = [r if len(r) == 3 else (*r, None) for r in RUNS]
# Under AddressSanitizer (the sanitized suite, ~6x slower; its GEMM ~50x)
# the float32 runs of a convolution model and of a GPT only, the GPT's final
# evaluation over 4 batches instead of 32 (it took half of each charlm run,
# about 60 s at 2 threads on a Zen 3); the Release suite runs them all.
if "ASAN_OPTIONS" in os.environ:
    RUNS = [(n, a + ["--eval-batches", "4"] if n == "charlm" and not REFERENCE else a, i) for n, a, i in RUNS
            if n in ("shapes", "charlm") and "bf16" not in a and i is None]
WHAT = f"{BUILDS[0]} and {BUILDS[1]}" if BUILDS else f"this CPU and {REFERENCE}" if REFERENCE else \
    "1 and 2 threads"
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


def digest(x):
    """[shape, sha256 of the values' bytes, their sum]: the sum only to show how far a changed dataset moved."""
    x = np.ascontiguousarray(x)
    h = hashlib.sha256(str(x.dtype).encode() + str(x.shape).encode() + x.tobytes()).hexdigest()
    return [list(x.shape), h, float(np.nansum(x.astype(np.float64)))]


def logged(log):
    """{dataset path: its numbers} of one log, as compared (SKIP and wall clocks left out)."""
    with h5py.File(log, "r") as f:
        return {path: x for path, ds in datasets(f) if not any(s in path for s in SKIP)
                for x in [numbers(ds)] if x is not None}


failures = []
reference = {}
if REFERENCE and not WRITE:
    with open(REFERENCE) as f:
        reference = json.load(f)["runs"]
written = {}
for i, (name, args, isa) in enumerate(RUNS):
    logs = []
    across = isa == "avx2-vs-avx512"
    label = name + (" bf16" if "bf16" in args else "") + \
        (" on AVX2 and AVX-512" if across else f" HEED_CPU_ISA={isa}" if isa else "")
    env = dict(os.environ, HEED_CPU_ISA=isa) if isa and not across else None
    pairs = [("2", BUILDS[0]), ("2", BUILDS[1])] if BUILDS else [("2", HEED)] if REFERENCE else \
        [("2", HEED), ("2", HEED)] if across else [("1", HEED), ("2", HEED)]
    for threads, program in pairs:
        if across:
            env = dict(os.environ, HEED_CPU_ISA="avx2" if logs else "avx512")
        out = os.path.join(TMP, f"{i}-{name}-{len(logs)}.h5")
        r = subprocess.run([program, "run", name, *args, "--threads", threads, "--out", out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        if r.returncode != 0 and "bf16" in args and "bf16 needs a CPU with" in r.stdout:
            print(f"{label}: not run, this CPU has no native bf16 ({r.stdout.strip().splitlines()[-1][:120]})")
            if WRITE:
                failures.append(f"{label}: not run here; write the digests on a CPU with AVX512-BF16, so that "
                                "every run has them")
            break
        if r.returncode != 0:
            failures.append(f"{program} run {name} --threads {threads} exited {r.returncode}:\n{r.stdout[-2000:]}")
            break
        logs.append(out)
    if len(logs) != len(pairs):
        continue
    first = logged(logs[0])
    if REFERENCE:  # the run against the digests its label has in the file
        if WRITE:
            written[label] = {path: digest(x) for path, x in first.items()}
            print(f"{label}: {len(first)} datasets written")
            continue
        if label not in reference:
            failures.append(f"{label}: no digests in {REFERENCE}; it holds {', '.join(reference) or 'none'}")
            continue
        want = reference[label]
        for path in sorted(set(want) - set(first)):
            failures.append(f"{label}: {path} is in {REFERENCE} but not in this log")
        for path, x in first.items():
            if path not in want:
                failures.append(f"{label}: {path} is logged but not in {REFERENCE}")
            elif digest(x)[:2] != want[path][:2]:
                got = digest(x)
                failures.append(f"{label}: {path} differs from {REFERENCE} (shape {got[0]} vs {want[path][0]}, "
                                f"sum {got[2]!r} vs {want[path][2]!r})")
        print(f"{label}: {len(first)} datasets compared with {REFERENCE}")
        if len(first) < 3:
            failures.append(f"{label}: only {len(first)} datasets compared; the logs' layout changed?")
        continue
    second = logged(logs[1])
    for path, x in first.items():
        if path not in second:
            failures.append(f"{label}: {path} is in the first log only ({WHAT})")
            continue
        y = second[path]
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
            diff = "shapes " + str(x.shape) + " vs " + str(y.shape) if x.shape != y.shape else \
                f"max difference {np.nanmax(np.abs(x - y)):.3g}"
            failures.append(f"{label}: {path} differs between {'AVX2 and AVX-512' if across else WHAT} ({diff})")
    compared = sum(path in second for path in first)
    if compared < 3:
        failures.append(f"{label}: only {compared} datasets compared; the logs' layout changed?")
    print(f"{label}: {compared} datasets compared")

shutil.rmtree(TMP, ignore_errors=True)
if WRITE:
    if failures:
        print("FAILED, nothing written:\n" + "\n".join(failures))
        sys.exit(1)
    cpu = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in open("/proc/cpuinfo") if ":" in line)}
    flags = cpu.get("flags", "").split()
    written_on = f"{cpu.get('model name', '?')}, family {cpu.get('cpu family', '?')} model {cpu.get('model', '?')}, " + \
        ("AVX-512" + (" with BF16" if "avx512_bf16" in flags else "") if "avx512f" in flags else "AVX2")
    with open(REFERENCE, "w") as f:  # one line per dataset
        f.write('{"about": "Digests of the logs of tests/experiments/test_thread_invariance.py\'s runs '
                '(--reference): [shape, sha256 of the values, their sum] per dataset.",\n')
        f.write(f' "cpu": {json.dumps(written_on)},\n')
        f.write(' "runs": {\n')
        for r, (label, sets) in enumerate(sorted(written.items())):
            f.write(f'  {json.dumps(label)}: {{\n')
            for d, (path, v) in enumerate(sorted(sets.items())):
                f.write(f'   {json.dumps(path)}: {json.dumps(v)}{"," if d + 1 < len(sets) else ""}\n')
            f.write(f'  }}{"," if r + 1 < len(written) else ""}\n')
        f.write(" }\n}\n")
    print(f"wrote {REFERENCE}: {len(written)} runs")
    sys.exit(0)
if failures:
    print("FAILED:\n" + "\n".join(failures))
    if REFERENCE:
        print(f"(A change meant to move these numbers rewrites the digests on an AVX-512 CPU with BF16: "
              f"{sys.argv[0]} HEED --write-reference {REFERENCE}, and says so in its commit.)")
    sys.exit(1)
print(f"every experiment logs the same bits: {WHAT}")
