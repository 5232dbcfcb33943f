#!/usr/bin/python3
"""tests/experiments/test_distributed_quick.py HEED TESTS: short checks under mpirun -np 2.

  - optim::DataParallel in a program of one's own (the test cases of
    tests/optim/test_data_parallel.cpp under mpirun): it starts MPI without
    a heed::Run; a parameter used on some processes only gets the mean of
    every process's gradient.
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


def check(ok, what):
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


try:
    # ---- DataParallel in a program of one's own -------------------------------------------
    t = mpirun([TESTS, "-tc=DataParallel:*"], timeout=300)
    check(t is not None and t.returncode == 0 and "4 passed" in t.stdout,
          f"DataParallel's test cases on 2 processes: {t and t.returncode} {t and (t.stdout + t.stderr)[-1500:]}")
finally:
    shutil.rmtree(TMP, ignore_errors=True)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
