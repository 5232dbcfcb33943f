#!/usr/bin/env python3
"""The ./heed driver script, on a copy of it in a scratch tree whose build is
faked: dpkg-query says every package is installed, cmake records its arguments
and builds nothing, and build/heed and the test binaries print where they ran
and with what. Checks that the driver builds in its own tree but runs programs
in the caller's directory, works through a symbolic link, takes --sanitize
anywhere, and lists its own commands and build/heed's for an unknown one.

usage: test_driver.py SOURCE_DIR HEED_CLI (the real build/heed: its list of
commands must be the driver's)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

source_dir, heed_cli = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def write(path, text, mode=0o755):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


PROBE = '#!/bin/sh\necho "{name} cwd=$(pwd)"\nfor a in "$@"; do echo "{name} arg=$a"; done\n'
CACHE = {"build": "HEED_BUILD_TESTS:BOOL=ON\nHEED_SANITIZE:BOOL=OFF\nCMAKE_BUILD_TYPE:STRING=Release\n",
         "build-sanitize": "HEED_BUILD_TESTS:BOOL=ON\nHEED_SANITIZE:BOOL=ON\nCMAKE_BUILD_TYPE:STRING=RelWithDebInfo\n"
                           "CMAKE_CXX_FLAGS_RELWITHDEBINFO:STRING=-O1 -g1 -D_GLIBCXX_ASSERTIONS\n"}

with tempfile.TemporaryDirectory(prefix="heed-driver-") as tmp:
    tree, bin_dir, elsewhere = (os.path.join(tmp, d) for d in ("tree", "bin", "elsewhere"))
    os.makedirs(elsewhere)
    os.makedirs(tree)
    shutil.copy(os.path.join(source_dir, "heed"), os.path.join(tree, "heed"))
    for b, cache in CACHE.items():
        write(os.path.join(tree, b, "CMakeCache.txt"), cache, 0o644)
        write(os.path.join(tree, b, "build.ninja"), "", 0o644)
        write(os.path.join(tree, b, "heed"), PROBE.format(name=b + "/heed"))
        write(os.path.join(tree, b, "tests", "heed_tests"), PROBE.format(name=b + "/heed_tests"))
    cmake_log = os.path.join(tmp, "cmake.log")
    write(os.path.join(bin_dir, "cmake"), '#!/bin/sh\necho "cwd=$(pwd) $*" >> %s\n' % cmake_log)
    write(os.path.join(bin_dir, "ctest"), '#!/bin/sh\necho "ctest cwd=$(pwd) $*"\n')
    write(os.path.join(bin_dir, "dpkg-query"),
          '#!/bin/sh\nfor a in "$@"; do case "$a" in -*) ;; *) echo "$a installed";; esac; done\n')
    env = dict(os.environ, PATH=bin_dir + ":" + os.environ["PATH"])

    def builds(log, build_dir):
        """Whether cmake --build ran on the tree's build_dir (given absolute, or relative from the tree)."""
        return any(("--build " + os.path.join(tree, build_dir) + " ") in line or
                   (line.startswith("cwd=" + tree + " ") and ("--build " + build_dir + " ") in line)
                   for line in log.splitlines())

    def driver(args, script=os.path.join(tree, "heed"), cwd=elsewhere):
        if os.path.exists(cmake_log):
            os.remove(cmake_log)
        r = subprocess.run([script] + args, cwd=cwd, env=env, capture_output=True, text=True)
        log = open(cmake_log).read() if os.path.exists(cmake_log) else ""
        return r, log

    # Called from another directory: build/heed runs there, the build in the tree.
    r, log = driver(["export", "mine.ckpt.h5", "-o", "out.safetensors"])
    check(r.returncode == 0, "heed export from elsewhere: status %d, stderr %s" % (r.returncode, r.stderr))
    check("build/heed cwd=" + elsewhere + "\n" in r.stdout, "build/heed runs in the caller's directory: " + r.stdout)
    check("build/heed arg=mine.ckpt.h5\n" in r.stdout, "arguments reach build/heed as given: " + r.stdout)
    check(builds(log, "build"), "the build is the tree's: " + log)

    # Through a symbolic link in another directory.
    link = os.path.join(tmp, "links", "heed")
    os.makedirs(os.path.dirname(link))
    os.symlink(os.path.join(tree, "heed"), link)
    r, log = driver(["info"], script=link)
    check(r.returncode == 0, "heed info through a link: status %d, stderr %s" % (r.returncode, r.stderr))
    check("build/heed cwd=" + elsewhere + "\n" in r.stdout, "through a link, build/heed runs: " + r.stdout)
    check(builds(log, "build"), "through a link, the tree is the link's target: " + log)

    # Doctest arguments: the binary runs in the caller's directory.
    r, _ = driver(["test", "-tc=x*"])
    check("build/heed_tests cwd=" + elsewhere + "\n" in r.stdout and "build/heed_tests arg=-tc=x*\n" in r.stdout,
          "heed test -tc=x* runs build/tests/heed_tests here: " + r.stdout + r.stderr)

    # --sanitize after doctest arguments: the sanitized tree, not passed on.
    r, log = driver(["test", "-tc=x*", "--sanitize"])
    check(r.returncode == 0, "heed test -tc=x* --sanitize: status %d, stderr %s" % (r.returncode, r.stderr))
    check("build-sanitize/heed_tests arg=-tc=x*\n" in r.stdout, "--sanitize anywhere: sanitized tests: " + r.stdout)
    check("arg=--sanitize" not in r.stdout, "--sanitize is not passed to doctest: " + r.stdout)
    check(builds(log, "build-sanitize"), "--sanitize builds build-sanitize: " + log)
    r, log = driver(["build", "--sanitize"])
    check(r.returncode == 0 and builds(log, "build-sanitize"),
          "heed build --sanitize still works: " + r.stderr + log)

    # An unknown command: both lists, status 2, nothing built.
    r, log = driver(["bogus"])
    check(r.returncode == 2, "heed bogus: status %d" % r.returncode)
    check(log == "", "heed bogus builds nothing: " + log)
    for c in ("test", "build", "setup", "help"):
        check(re.search(r"\b%s\b" % c, r.stderr) is not None, "heed bogus names the driver's %s: %s" % (c, r.stderr))
    real = subprocess.run([heed_cli, "bogus"], capture_output=True, text=True)
    m = re.search(r"expected one of: ([a-z, ]+)", real.stderr)
    check(m is not None, "build/heed bogus lists its commands: " + real.stderr)
    if m:
        for c in m.group(1).split(", "):
            check(re.search(r"\b%s\b" % c, r.stderr) is not None,
                  "heed bogus names build/heed's %s: %s" % (c, r.stderr))
            r2, _ = driver([c])
            check("build/heed arg=%s\n" % c in r2.stdout, "the driver hands %s to build/heed: %s" % (c, r2.stderr))

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("driver: all checks passed")
