#!/usr/bin/env bash
# run_tour.sh TOUR: runs the program made of docs/cpp-api.md's code blocks and
# checks that it does what the page says: --help, a run that learns the delay
# line, stopping early and resuming, the exported weights reloaded exactly.
set -euo pipefail
tour="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { printf 'cpp-api tour: FAILED: %s\n' "$*" >&2; exit 1; }

"$tour" --help >"$work/help.txt" || fail "--help exited with $?"
grep -q -- "--export" "$work/help.txt" || fail "--help does not list --export"

# A bad option: status 2 and a message naming it, through guard_main.
set +e
"$tour" --lr -1 >"$work/bad.txt" 2>&1
status=$?
set -e
[[ $status == 2 ]] || { cat "$work/bad.txt"; fail "--lr -1: expected exit status 2, got $status"; }
grep -q -- "--lr" "$work/bad.txt" || { cat "$work/bad.txt"; fail "--lr -1: the message does not name --lr"; }
! grep -q "terminate called" "$work/bad.txt" || fail "--lr -1 escaped as terminate called"

# Stopped halfway, then resumed with the printed command's checkpoint.
set +e
"$tour" --out "$work/tour.h5" --export "$work/tour.safetensors" --stop-after 200 >"$work/first.txt" 2>&1
status=$?
set -e
[[ $status == 130 ]] || { cat "$work/first.txt"; fail "--stop-after 200: expected exit status 130, got $status"; }
[[ ! -e $work/tour.safetensors ]] || fail "a stopped run exported its weights"
"$tour" --resume "$work/tour.ckpt.h5" >"$work/second.txt" 2>&1 || { cat "$work/second.txt"; fail "the resumed run failed"; }
cat "$work/second.txt"

grep -q "^y = " "$work/second.txt" || fail "tensor_basics printed nothing"
line="$(grep '^test mse' "$work/second.txt")" || fail "no 'test mse' line"
# "test mse M (predicting 0 everywhere: Z); reloaded from F: R"
read -r mse zero reloaded < <(sed -E 's/^test mse ([0-9.e+-]+) \(predicting 0 everywhere: ([0-9.e+-]+)\); reloaded from .*: ([0-9.e+-]+)$/\1 \2 \3/' <<<"$line")
awk -v m="$mse" -v z="$zero" 'BEGIN { exit !(m < 0.1 * z) }' || fail "test mse $mse is not below a tenth of $zero: the delay line was not learnt"
[[ $mse == "$reloaded" ]] || fail "the reloaded model gives $reloaded, the trained one $mse"
[[ -s $work/tour.safetensors ]] || fail "no exported weights"
# The attention maps logged through nn::KeepAttention: one [1, 2, 16, 16]
# map a logged step, rows summing to 1, and a head that looks two back.
/usr/bin/python3 - "$work/tour.h5" <<'PY' || fail "the log's attention maps are not what the page says"
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "r") as f:
    v, s = f["series/attention/attn/values"][()], f["series/attention/attn/step"][()]
assert v.shape == (8, 1, 2, 16, 16), v.shape
assert list(s) == list(range(50, 401, 50)), list(s)
assert np.allclose(v.sum(-1), 1, atol=1e-5)
last = v[-1, 0]                                    # [heads, query, key]
two_back = np.array([[last[h, t, t - 2] for t in range(2, 16)] for h in range(2)]).mean(1)
assert two_back.max() > 0.5, two_back              # one head puts most weight on t - 2
print(f"attention maps: {v.shape}, weight on t-2 by head {np.round(two_back, 3)}")
PY
echo "cpp-api tour: OK (test mse $mse against $zero for zeros)"
