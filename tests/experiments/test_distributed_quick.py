#!/usr/bin/python3
"""tests/experiments/test_distributed_quick.py HEED TESTS: short checks under mpirun -np 2.

  - optim::DataParallel in a program of one's own (the test cases of
    tests/optim/test_data_parallel.cpp under mpirun): it starts MPI without
    a heed::Run; a parameter used on some processes only gets the mean of
    every process's gradient.
  - processes whose options differ: the options given on the command line
    are named first (another --steps was reported as another --warmup, the
    default derived from it).
  - an unknown command or experiment is reported as every error is,
    "heed: rank R of N: ..." (it was printed without the rank).
"""
import os
import shutil
import subprocess
import sys
import tempfile

HEED = sys.argv[1]
TESTS = sys.argv[2]  # the test program (heed_tests)
TMP = tempfile.mkdtemp(prefix="heed-distq-")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
if "ASAN_OPTIONS" in ENV:  # Open MPI's plugins leak at exit (tests/experiments/test_distributed.py)
    ENV["ASAN_OPTIONS"] += ":detect_leaks=0"
MPIRUN = ["mpirun", "--bind-to", "none", "--oversubscribe"]
failures = []


def check(ok, what, details=""):
    what += "" if ok else ": " + details
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def mpirun(*programs, timeout=120):
    """mpirun of one or more programs (each a list of words), 1 process each
    when several are given (an MPMD job), else 2 processes. Returns the
    CompletedProcess, or None when the job hung (it is killed)."""
    cmd = list(MPIRUN)
    if len(programs) == 1:
        cmd += ["-np", "2"] + programs[0]
    else:
        for i, words in enumerate(programs):
            cmd += ([":"] if i else []) + ["-np", "1"] + words
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV, cwd=TMP,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None


def said(r):
    """The job's exit status and heed's lines of its stderr (not Open MPI's banners)."""
    if r is None:
        return "hung (killed after the timeout)"
    return f"exit {r.returncode}: " + " | ".join(l for l in r.stderr.splitlines() if "heed" in l)[-600:]


try:
    # ---- DataParallel in a program of one's own -------------------------------------------
    t = mpirun([TESTS, "-tc=DataParallel:*"], timeout=300)
    check(t is not None and t.returncode == 0 and "4 passed" in t.stdout, "DataParallel's test cases on 2 processes",
          f"{t and t.returncode} {t and (t.stdout + t.stderr)[-1500:]}")

    # ---- processes whose options differ ---------------------------------------------------------
    corpus = os.path.join(TMP, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("In the beginning God created the heaven and the earth. And the earth was without form. " * 50)
    LM = [HEED, "run", "charlm", "--text", corpus, "--layers", "1", "--heads", "2", "--width", "16", "--context", "8",
          "--batch", "4", "--threads", "1", "--out", os.path.join(TMP, "mixed.h5")]
    r = mpirun(LM + ["--steps", "20"], LM + ["--steps", "30"])
    check(r is not None and r.returncode == 1 and "rank 1's --steps is not rank 0's (rank 1: '30', rank 0: '20'), "
          "nor is its --warmup;" in r.stderr and not os.path.exists(os.path.join(TMP, "mixed.h5")),
          "another --steps on rank 1 is named as --steps (then --warmup, derived from it), and no log is written",
          said(r))

    # ---- an unknown command or experiment -------------------------------------------------------
    for words, what in [(["nosuch"], "unknown command 'nosuch'"), (["run", "nosuch"], "unknown experiment 'nosuch'")]:
        r = mpirun([HEED] + words)
        lines = [l for l in (r.stderr.splitlines() if r else []) if what in l]
        check(r is not None and r.returncode == 2 and lines and all(l.startswith("heed: rank ") for l in lines)
              and any(l.startswith(f"heed: rank 0 of 2: {what}") for l in lines),
              f"heed {' '.join(words)} on 2 processes: status 2, 'heed: rank R of 2: {what}'", said(r))
finally:
    shutil.rmtree(TMP, ignore_errors=True)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
