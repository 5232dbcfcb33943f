#!/usr/bin/python3
"""tests/experiments/test_distributed_quick.py HEED TESTS: short checks under mpirun -np 2.

  - optim::DataParallel in a program of one's own (the test cases of
    tests/optim/test_data_parallel.cpp under mpirun): it starts MPI without
    a heed::Run; a parameter used on some processes only gets the mean of
    every process's gradient.
  - processes whose options differ: the options given on the command line
    are named first (another --steps was reported as another --warmup, the
    default derived from it).
  - an unknown command or experiment is reported as every error is, once,
    "heed: rank R of N: ..." (every process printed it, without the rank).
  - processes that run different commands (a training and heed info, or
    the training's --help, on one process) are refused at once, naming both
    (the others waited forever in MPI's start or their first exchange);
    the commands that train nothing (info, inspect, export, ...) are
    refused under mpirun (two processes of export wrote one file at once);
    --help is printed once.
"""
import os
import shutil
import signal
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
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                         env=ENV, cwd=TMP, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return subprocess.CompletedProcess(cmd, p.returncode, out, err)
    except subprocess.TimeoutExpired:  # mpirun and the processes it started, which Open MPI puts in its group
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
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
        check(r is not None and r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"heed: rank 0 of 2: {what}"),
              f"heed {' '.join(words)} on 2 processes: status 2, once 'heed: rank 0 of 2: {what}'", said(r))

    # ---- help: printed once -------------------------------------------------------------------
    for words, usage in [(["run", "charlm", "--help"], "usage: heed run charlm"), (["--help"], "usage: heed <command>")]:
        r = mpirun([HEED] + words)
        check(r is not None and r.returncode == 0 and r.stdout.count(usage) == 1,
              f"heed {' '.join(words)} on 2 processes: the help once, status 0", said(r) + (r.stdout[-300:] if r else ""))

    # ---- processes that run different commands: refused at once, naming both --------------------
    ckpt = os.path.join(TMP, "one.ckpt.h5")
    one = subprocess.run(LM[:-1] + [os.path.join(TMP, "one.h5"), "--steps", "2"], capture_output=True, text=True,
                         timeout=120, cwd=TMP)
    check(one.returncode == 0 and os.path.exists(ckpt), "a 2-step charlm run, one process", one.stderr[-300:])
    train = LM + ["--steps", "200"]
    for other, role in [([HEED, "info"], "heed info"), (LM + ["--help"], "heed run charlm --help"),
                        ([HEED, "inspect", os.path.join(TMP, "one.h5")], "heed inspect")]:
        r = mpirun(train, other, timeout=60)
        want = f"heed: rank 0 of 2: the processes of this job run different commands: rank 1 runs '{role}', rank 0 'heed run charlm'"
        check(r is not None and r.returncode == 1 and r.stderr.count(want) == 1 and r.stderr.count("heed: rank") == 1
              and not os.path.exists(os.path.join(TMP, "mixed.h5")),
              f"heed run charlm on rank 0 and {role} on rank 1: refused at once, naming both", said(r))

    # ---- commands that train nothing: refused under mpirun, and no file written ---------------
    before = sorted(os.listdir(TMP))
    for words in (["info"], ["inspect", ckpt], ["plot", os.path.join(TMP, "one.h5")], ["sample", ckpt, "--tokens", "20"],
                  ["export", ckpt, "-o", os.path.join(TMP, "e.safetensors")],
                  ["quantize", ckpt, "--method", "uniform", "--bits", "8", "-o", os.path.join(TMP, "q.ckpt.h5")]):
        r = mpirun([HEED] + words)
        want = f"heed: rank 0 of 2: {words[0]} takes no part in data-parallel training: run it as one process, without mpirun (it was started as 2 processes)"
        check(r is not None and r.returncode == 2 and r.stderr.count(want) == 1 and r.stderr.count("heed: rank") == 1,
              f"heed {words[0]} on 2 processes is refused, once", said(r))
    check(sorted(os.listdir(TMP)) == before, "... and no file is written", f"{before} -> {sorted(os.listdir(TMP))}")
finally:
    shutil.rmtree(TMP, ignore_errors=True)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
