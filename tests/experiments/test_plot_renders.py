#!/usr/bin/python3
"""plot.renders: `heed plot` draws every figure of a real shapes log, of a
CNN-only log, of a language-model log and of a quantization sweep's log
(`heed run compression`) that follow docs/log-format.md, of small
timeseries, crossattn and scaling runs, and of a user's own program's logs
(also ones whose experiment is called like a bundled one: the user's
attention series are drawn too, their panels named by batch and head), and
each PNG decodes with the size heed_plot.py gives it (and is, drawn once,
the PNG matplotlib's savefig writes in two draws with the layout engine set).

    /usr/bin/python3 tests/experiments/test_plot_renders.py path/to/heed

Run by CTest (tests/CMakeLists.txt). Needs python3-h5py and python3-matplotlib.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import matplotlib.image
import numpy as np

HEED = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="heed-plot-test-")
failures = []

# Pixel sizes (width, height) that heed_plot.py gives each figure (100 dpi).
SHAPES_SIZES = {"losses.png": (1200, 450), "pair_score.png": (600, 400)}
SHAPES_SIZES.update({f"sample_{i}.png": (1000, 450) for i in range(6)})
SHAPES_SIZES.update({f"attention_{i}.png": (700, 800) for i in range(6)})
# A log without the attention model (--model cnn): its figures. The cases
# below that test heed plot's handling of a file, not the figures, plot such
# a log (7 figures, 1.7-1.9 s; all of a shapes log's take 3.3-3.7 s).
CNN_SIZES = {k: v for k, v in SHAPES_SIZES.items() if k.startswith(("losses", "sample"))}


def run(args, **kw):
    r = subprocess.run([HEED] + args, capture_output=True, text=True, timeout=120, **kw)
    return r


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED:", what)


def check_pngs(out_dir, printed, expected):
    """expected: file name -> (width, height). printed: the lines heed plot printed."""
    names = sorted(os.listdir(out_dir))
    check(names == sorted(expected), f"{out_dir}: files {names}, expected {sorted(expected)}")
    check(sorted(os.path.basename(p) for p in printed) == sorted(expected),
          f"{out_dir}: heed plot printed {printed}")
    for name, (w, h) in expected.items():
        path = os.path.join(out_dir, name)
        if not os.path.exists(path):
            continue
        img = matplotlib.image.imread(path)
        check(img.shape[:2] == (h, w), f"{name}: {img.shape[1]}x{img.shape[0]} pixels, expected {w}x{h}")
        # Not a blank canvas: a figure has far more than one colour. (Each
        # pixel's 8-bit channels packed into one integer: np.unique over rows
        # took half of this test's time.)
        px = np.round(img.reshape(-1, img.shape[-1]) * 255).astype(np.uint32)
        colours = np.zeros(len(px), np.uint32)
        for ch in range(px.shape[1]):
            colours = colours << 8 | px[:, ch]
        n_colours = len(np.unique(colours))
        check(n_colours > 20, f"{name}: looks blank ({n_colours} colours)")


def plot(log, out_dir=None, schema=True):
    args = ["plot", log] + (["-o", out_dir] if out_dir else [])
    r = run(args)
    check(r.returncode == 0, f"heed {' '.join(args)} exited {r.returncode}: {r.stderr}")
    # A log in the documented schema (heed's, or the tests' own): nothing left out.
    if schema:
        check("left out of" not in r.stderr and "skipped" not in r.stderr, f"heed {' '.join(args)}: {r.stderr!r}")
    # A log axis's tick labels ($\mathdefault{2^{3}}$ on scaling's d_k axes) drawn as plain numbers.
    check("raw math markup" not in r.stderr, f"heed {' '.join(args)}: {r.stderr!r}")
    return [l for l in r.stdout.splitlines() if l]


try:
    # ---- a real shapes run: both models, attention maps, pair score ----
    log = os.path.join(TMP, "x.h5")
    r = run(["run", "shapes", "--epochs", "1", "--train", "300", "--test", "20", "--batch", "50", "--out", log])
    check(r.returncode == 0, f"heed run shapes exited {r.returncode}: {r.stderr}")
    printed = plot(log)  # default directory: x_plots beside the log
    check_pngs(os.path.join(TMP, "x_plots"), printed, SHAPES_SIZES)

    # ---- the same log without the attention model (as --model cnn writes it) ----
    cnn = os.path.join(TMP, "cnn.h5")
    with h5py.File(log, "r", libver="latest", swmr=True) as src, h5py.File(cnn, "w", libver="latest") as dst:
        for k, v in src.attrs.items():
            dst.attrs[k] = v
        dst.attrs["config.model"] = "cnn"
        for group in ("samples", "models"):
            src.copy(group, dst)
        del dst["models/attention"]
        src.copy("metrics/cnn", dst.require_group("metrics"))
        src.copy("series/cnn", dst.require_group("series"))
    printed = plot(cnn, os.path.join(TMP, "cnn_figures"))
    check_pngs(os.path.join(TMP, "cnn_figures"), printed, CNN_SIZES)

    # ---- a language-model log in the documented schema (docs/log-format.md) ----
    lm = os.path.join(TMP, "lm.h5")
    probe = "In the beginning"  # T = 16 characters
    t, heads, layers, rng = len(probe), 4, 2, np.random.default_rng(0)
    with h5py.File(lm, "w", libver="latest") as f:
        f.attrs["experiment"] = "charlm"
        f.attrs["heed_log_format"] = 1
        steps = np.arange(1, 201, dtype=np.float64)
        for name, values in (("train_loss", 4.3 * np.exp(-steps / 80) + 1.2 + 0.05 * rng.standard_normal(200)),
                             ("lr", np.minimum(steps / 20, 1.0) * 3e-4),
                             ("grad_norm", 1.0 + rng.random(200)),
                             ("tokens_per_second", 4000 + 100 * rng.standard_normal(200))):
            f["metrics/" + name] = np.stack([steps, values, steps * 0.2], axis=1)
        val_steps = np.arange(50, 201, 50, dtype=np.float64)
        f["metrics/val_loss"] = np.stack([val_steps, 4.3 * np.exp(-val_steps / 80) + 1.3, val_steps * 0.2], axis=1)
        for name in f["metrics"]:
            f["metrics/" + name].attrs["columns"] = "step, value, wall_seconds"
        for layer in range(layers):
            scores = rng.standard_normal((2, heads, t, t)) + np.triu(np.full((t, t), -np.inf), 1)
            maps = np.exp(scores - scores.max(-1, keepdims=True))
            f[f"series/attention/layer{layer}/maps/values"] = (maps / maps.sum(-1, keepdims=True)).astype(np.float32)
            f[f"series/attention/layer{layer}/maps/step"] = np.array([100, 200], dtype=np.int64)
        f["series/attention"].attrs["probe_text"] = probe
    printed = plot(lm)
    check_pngs(os.path.join(TMP, "lm_plots"), printed,
               {"losses.png": (1200, 800), "attention_layer0.png": (1600, 450), "attention_layer1.png": (1600, 450)})

    # ---- a probe text holding '$' (LaTeX, prices, code): drawn literally;
    # matplotlib parsed "$a^$b" as math and failed with a traceback ----
    dollar = os.path.join(TMP, "dollar.h5")
    shutil.copyfile(lm, dollar)
    with h5py.File(dollar, "r+") as f:
        f["series/attention"].attrs["probe_text"] = "$a^$b $a^$b $a^"  # 16 characters, as the maps
    printed = plot(dollar)
    check_pngs(os.path.join(TMP, "dollar_plots"), printed,
               {"losses.png": (1200, 800), "attention_layer0.png": (1600, 450), "attention_layer1.png": (1600, 450)})
    # An output that cannot be written: one line naming it, not a traceback
    # (a directory where a figure goes stands for an unwritable directory,
    # which root, running the suite, could still write).
    blocked = os.path.join(TMP, "blocked_plots")
    os.makedirs(os.path.join(blocked, "losses.png"))
    r = run(["plot", lm, "-o", blocked])
    check(r.returncode == 1 and "cannot write" in r.stderr and "losses.png" in r.stderr and
          "Traceback" not in r.stderr, f"an unwritable figure: exit {r.returncode}, {r.stderr!r}")

    # A file where the figures' directory goes: the command line's mistake,
    # status 2, the file unchanged (it was "cannot create the directory ...:
    # File exists", status 1).
    a_file = os.path.join(TMP, "a_file")
    with open(a_file, "w") as f:
        f.write("mine\n")
    r = run(["plot", lm, "-o", a_file])
    check(r.returncode == 2 and f"plot: --out '{a_file}' is a file; expected a directory" in r.stderr
          and open(a_file).read() == "mine\n", f"-o a file: exit {r.returncode}, {r.stderr!r}")

    # ---- a user's own program's log: its metrics, and its attention maps by their names ----
    mine = os.path.join(TMP, "mine.h5")
    with h5py.File(mine, "w", libver="latest") as f:
        f.attrs["experiment"] = "my_trainer"
        f.attrs["heed_log_format"] = 1
        steps = np.arange(1, 51, dtype=np.float64)
        f["metrics/loss"] = np.stack([steps, 2.0 / steps, steps * 0.1], axis=1)
        for layer in range(2):
            scores = rng.standard_normal((3, 2, 12, 12)) + np.triu(np.full((12, 12), -np.inf), 1)
            maps = np.exp(scores - scores.max(-1, keepdims=True))
            f[f"series/blocks/{layer}/attention/values"] = (maps / maps.sum(-1, keepdims=True)).astype(np.float32)
            f[f"series/blocks/{layer}/attention/step"] = np.array([10, 20, 30], dtype=np.int64)
        f["series/hidden_norm/values"] = rng.random((3, 8)).astype(np.float32)  # not a map: no figure
        f["series/hidden_norm/step"] = np.array([10, 20, 30], dtype=np.int64)
    printed = plot(mine)
    check_pngs(os.path.join(TMP, "mine_plots"), printed,
               {"metrics.png": (1200, 350), "blocks_0_attention.png": (800, 450),
                "blocks_1_attention.png": (800, 450)})

    # ---- a user's own program whose heed::Run is called like a bundled
    # experiment: that experiment's figures, then every attention series of
    # the user's they did not draw (panel titles: checked below) ----
    def user_log(path, experiment, series):
        """A log with one metric and two rows of each series (name -> shape of a row's maps)."""
        with h5py.File(path, "w", libver="latest") as f:
            f.attrs["experiment"] = experiment
            f.attrs["heed_log_format"] = 1
            steps = np.arange(1, 21, dtype=np.float64)
            f["metrics/train_loss"] = np.stack([steps, 2.0 / steps, steps * 0.1], axis=1)
            for name, shape in series.items():
                scores = rng.standard_normal((2,) + shape)
                maps = np.exp(scores - scores.max(-1, keepdims=True))
                f[f"series/{name}/values"] = (maps / maps.sum(-1, keepdims=True)).astype(np.float32)
                f[f"series/{name}/step"] = np.array([10, 20], dtype=np.int64)

    named_charlm, named_shapes = os.path.join(TMP, "named_charlm.h5"), os.path.join(TMP, "named_shapes.h5")
    user_log(named_charlm, "charlm", {
        "attention/blocks.0.attn": (2, 2, 8, 8),  # nn::KeepAttention's [N, H, T, S]: 4 panels
        "attention/layer0/maps": (2, 6, 6),       # charlm's own [H, T, T]: its attention_layer0.png
        "attention/layer1/maps": (1, 3, 6, 6),    # charlm's name, not its shape: drawn as the user's
        "attention/layer0": (2, 5, 5)})           # a file name charlm's figures took already
    check_pngs(os.path.join(TMP, "named_charlm_plots"), plot(named_charlm, schema=False),
               {"losses.png": (1200, 800), "attention_layer0.png": (800, 450),
                "attention_blocks.0.attn.png": (1600, 450), "attention_layer1_maps.png": (1200, 450),
                "attention_layer0_2.png": (800, 450)})
    # A model that is one attention layer: KeepAttention::maps("attention") names its series "attention".
    user_log(named_shapes, "shapes", {"attention": (1, 2, 6, 6)})
    check_pngs(os.path.join(TMP, "named_shapes_plots"), plot(named_shapes, schema=False),
               {"losses.png": (1200, 450), "attention.png": (800, 450)})

    # ---- a quantization sweep's log in the documented schema (heed run compression) ----
    comp = os.path.join(TMP, "comp.h5")
    methods, bits = ["uniform", "hadamard", "gaussian", "e8", "lplr"], [2, 3, 4, 8]
    with h5py.File(comp, "w", libver="latest") as f:
        f.attrs["experiment"] = "compression"
        f.attrs["heed_log_format"] = 1
        f.attrs["models"], f.attrs["methods"], f.attrs["bits"] = "charlm,shapes", ",".join(methods), "2,3,4,8"
        quality = {"charlm": {"val_loss": 1.58}, "shapes": {"test_mse": 0.26, "pair_score": 0.34}}
        step = 0
        for model, base in quality.items():
            for name, value in base.items():
                f[f"baseline/{model}/{name}"] = np.array([value])
            for m, method in enumerate(methods):
                rows = {k: [] for k in ["bits", "bits_per_weight", "bits_per_parameter", "rel_error", *base]}
                for b in bits:
                    step += 1
                    err = 2.0 ** -b * (1 + 0.1 * m)
                    for k, v in (("bits", b), ("bits_per_weight", b + 0.25), ("bits_per_parameter", b + 0.3),
                                 ("rel_error", err), *((k, v * (1 + err)) for k, v in base.items())):
                        rows[k].append([step, v, step * 0.5])
                for k, r in rows.items():
                    f[f"metrics/{model}/{method}/{k}"] = np.array(r, dtype=np.float64)
    printed = plot(comp)
    check_pngs(os.path.join(TMP, "comp_plots"), printed, {"compression.png": (1500, 900)})
    # ---- small timeseries and crossattn runs (figures of heed_plot_signals.py) ----
    for name, args, sizes in (
            ("timeseries", ["--length", "32", "--period-min", "4", "--period-max", "8"],
             dict({"losses.png": (1200, 450), "same_phase.png": (600, 400), "attention_maps.png": (800, 450)},
                  **{f"forecast_{i}.png": (1000, 450) for i in range(4)},
                  **{f"attention_signal_{i}.png": (1000, 500) for i in range(4)})),
            ("crossattn", ["--length", "32", "--dim", "16"],
             dict({"losses.png": (1200, 450), "shape_tokens.png": (600, 400)},
                  **{f"sample_{i}.png": (1000, 1200) for i in range(4)}))):
        out = os.path.join(TMP, name + ".h5")
        r = run(["run", name, "--steps", "20", "--test", "8", "--eval-every", "10", "--out", out] + args)
        check(r.returncode == 0, f"heed run {name} exited {r.returncode}: {r.stderr}")
        check_pngs(os.path.join(TMP, name + "_plots"), plot(out), sizes)

    # ---- logs edited by hand: a dataset of another shape than its figure
    # expects is left out of it with one line naming the dataset, its shape
    # and the shape expected (a traceback before); a period <= 0 is refused
    # (it drew its marks for ever) before any figure or directory is made ----
    def edited(source, name, edit):
        path = os.path.join(TMP, name + ".h5")
        shutil.copyfile(source, path)
        with h5py.File(path, "r+") as f:
            edit(f)
        return path

    def replace(f, path, data):
        del f[path]
        f[path] = data

    ts = os.path.join(TMP, "timeseries.h5")
    with h5py.File(ts, "r") as f:
        ts_maps = f["series/attention/maps/values"][()]
        ts_s, ts_t = f["samples/clean"].shape
    def edit_ts(f):  # clean one position short, the maps of another rank
        replace(f, "samples/clean", f["samples/clean"][()][:, 1:])
        replace(f, "series/attention/maps/values", ts_maps.reshape((ts_maps.shape[0], -1) + ts_maps.shape[-2:]))

    def edit_shapes(f):  # a transposed metric, an input without its channel axis
        replace(f, "metrics/cnn/train_loss", f["metrics/cnn/train_loss"][()].T)
        replace(f, "samples/input", f["samples/input"][()][:, 0])

    with h5py.File(cnn, "r") as f:
        rows, (samples, _, length) = f["metrics/cnn/train_loss"].shape[0], f["samples/input"].shape
    for name, source, edit, lines in (
            ("bad_ts", ts, edit_ts,
             [f"'samples/clean' has shape [{ts_s}, {ts_t - 1}], expected [S, T] (T = {ts_t} as in 'samples/input'): "
              "left out of forecast_<i>.png",
              "'series/attention/maps/values' has shape [{}, {}, {}, {}], expected [n, S, Y, H, T, T]: left out of "
              "attention_maps.png".format(ts_maps.shape[0], int(np.prod(ts_maps.shape[1:-2])), *ts_maps.shape[-2:])]),
            ("bad_shapes", cnn, edit_shapes,
             [f"'metrics/cnn/train_loss' has shape [3, {rows}], expected [n, 3]: left out of losses.png",
              f"'samples/input' has shape [{samples}, {length}], expected [S, C, T]: left out of the figures"]),
            ("text_lr", lm, lambda f: replace(f, "metrics/lr", np.bytes_(b"abc")),
             ["'metrics/lr' holds |S3 values, expected [n, 3]: left out of losses.png"])):
        path = edited(source, name, edit)
        out_dir = os.path.join(TMP, name + "_plots")
        r = run(["plot", path, "-o", out_dir])
        check(r.returncode == 0 and "Traceback" not in r.stderr, f"{name}: exit {r.returncode}, {r.stderr!r}")
        for line in lines:
            check("plot: " + line in r.stderr.splitlines(), f"{name}: no line {line!r} in {r.stderr!r}")
        check(os.path.exists(os.path.join(out_dir, "losses.png")), f"{name}: the other figures were not drawn")
    for value in (0.0, -3.0):
        bad_period = edited(ts, "bad_period", lambda f: f["samples/period"].__setitem__(1, value))
        with open(bad_period, "rb") as f:
            before = f.read()
        try:
            r = subprocess.run([HEED, "plot", bad_period], capture_output=True, text=True, timeout=60)
            check(r.returncode == 1 and r.stderr.strip() == f"heed: plot: '{bad_period}': samples/period[1] is "
                  f"{value:g}, expected a period > 0 (the number of steps per cycle of test signal 1)",
                  f"a period of {value}: exit {r.returncode}, {r.stderr!r}")
        except subprocess.TimeoutExpired:
            check(False, f"heed plot of a log whose period is {value} still ran after 60 s")
        check(not os.path.exists(os.path.join(TMP, "bad_period_plots")), f"a period of {value}: a directory was made")
        with open(bad_period, "rb") as f:
            check(f.read() == before, "heed plot changed the log it refused")

    # ---- what the figures show: every figure of every log above, and of
    # runs whose metrics have one row (a sine run's final_mse, a shapes run
    # stopped after one step), drawn in this process with the figures
    # inspected as they are saved: a line through one point needs a marker
    # (else the panel is empty), and a panel with several labelled lines a
    # legend ----
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "plot"))
    import heed_plot
    import matplotlib.figure

    drawn = []
    titles = {}  # figure -> its panels' titles
    real_savefig = matplotlib.figure.Figure.savefig
    # Figures of a log heed plot drew above (its PNGs checked) are inspected,
    # not drawn again: that took 23 of this test's 100 s. The one-row logs
    # are drawn here only, so theirs are saved.
    render = [False]

    def inspecting_savefig(fig, path, *args, **kwargs):
        name = os.path.relpath(path, TMP)
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        explained = {t.get_text() for legend in legends for t in legend.get_texts()}  # one legend may serve all
        for k, ax in enumerate(fig.axes):
            labels = {l.get_label() for l in ax.get_lines() if not l.get_label().startswith("_")}
            if len(labels) >= 2:
                check(labels <= explained, f"{name}, panel {k} ({ax.get_title()!r}): lines {sorted(labels)} "
                      f"but the figure's legends name only {sorted(explained)}")
            for line in ax.get_lines():
                if len(line.get_xdata()) == 1:
                    check(line.get_marker() not in (None, "", " ", "None", "none"),
                          f"{name}, panel {k} ({ax.get_title()!r}): a line through one point without a marker")
        drawn.append(name)
        titles[name] = [ax.get_title() for ax in fig.axes if ax.get_title()]
        return real_savefig(fig, path, *args, **kwargs) if render[0] else None

    one_row = []
    sine = os.path.join(TMP, "sine.h5")
    r = run(["run", "sine", "--steps", "30", "--out", sine])  # exits 1: 30 steps do not reach the threshold
    check(os.path.exists(sine), f"heed run sine wrote no log: {r.stderr}")
    one_row.append(sine)
    stopped = os.path.join(TMP, "stopped.h5")
    r = run(["run", "shapes", "--epochs", "1", "--train", "100", "--test", "15", "--batch", "50", "--stop-after", "1",
             "--out", stopped])
    check(r.returncode == 130, f"heed run shapes --stop-after 1 exited {r.returncode}: {r.stderr}")
    one_row.append(stopped)
    scaling = os.path.join(TMP, "scaling.h5")
    r = run(["run", "scaling", "--dk-max", "16", "--queries", "8", "--keys", "8", "--seeds", "2", "--dim", "16",
             "--steps", "20", "--eval-every", "10", "--out", scaling])
    check(r.returncode == 0, f"heed run scaling exited {r.returncode}: {r.stderr}")
    # Its series prev_token_attention ([2, seeds]) is a score, not a map: no figure of its own.
    check_pngs(os.path.join(TMP, "scaling_plots"), plot(scaling),
               {"saturation.png": (1200, 800), "training.png": (1200, 450)})
    matplotlib.figure.Figure.savefig = inspecting_savefig
    try:
        for source in ([log, cnn, lm, comp, scaling, named_charlm, named_shapes] +
                       [os.path.join(TMP, n + ".h5") for n in ("timeseries", "crossattn")] + one_row):
            render[0] = source in one_row
            try:
                heed_plot.plot(source, os.path.join(TMP, "inspected", os.path.basename(source)))
            except SystemExit as e:  # heed_plot.die
                check(False, f"heed_plot.plot({source}) refused it (status {e.code})")
    finally:
        matplotlib.figure.Figure.savefig = real_savefig
    check(len(drawn) >= 40, f"only {len(drawn)} figures inspected")
    # A map with batch and head dimensions says which panel is which.
    for figure, expected in (
            ("named_charlm.h5/attention_blocks.0.attn.png",
             ["batch 0, head 0", "batch 0, head 1", "batch 1, head 0", "batch 1, head 1"]),
            ("named_charlm.h5/attention_layer1_maps.png", ["batch 0, head 0", "batch 0, head 1", "batch 0, head 2"]),
            ("named_charlm.h5/attention_layer0_2.png", ["0", "1"]),
            ("named_shapes.h5/attention.png", ["batch 0, head 0", "batch 0, head 1"])):
        got = titles.get(os.path.join("inspected", figure))
        check(got == expected, f"{figure}: panel titles {got}, expected {expected}")
    with h5py.File(sine, "r", libver="latest", swmr=True) as f:
        check(len(f["metrics/final_mse"]) == 1, "the sine log's final_mse does not have one row: the case is not tested")

    # ---- one draw a figure: heed_plot.save computes the layout and removes
    # the layout engine before savefig, which then draws once instead of
    # twice. The PNGs must be those savefig writes with the engine left set,
    # byte for byte: the CNN log's figures drawn here that way against the
    # ones heed plot wrote above ----
    real_set_engine = matplotlib.figure.Figure.set_layout_engine

    def engine_kept(fig, layout=None, **kwargs):
        if layout is None:  # save()'s removal: the engine stays, savefig draws twice
            return None
        return real_set_engine(fig, layout, **kwargs)

    matplotlib.figure.Figure.set_layout_engine = engine_kept
    try:
        heed_plot.plot(cnn, os.path.join(TMP, "cnn_two_draws"))
    finally:
        matplotlib.figure.Figure.set_layout_engine = real_set_engine
    for name in sorted(CNN_SIZES):
        with open(os.path.join(TMP, "cnn_figures", name), "rb") as once, \
                open(os.path.join(TMP, "cnn_two_draws", name), "rb") as twice:
            check(once.read() == twice.read(), f"{name}: drawn once, not the PNG savefig draws with the engine set")

    # ---- a log whose writer was killed before SWMR began (a resume opens
    # its log read-write first): still marked open, which every reader
    # refuses; heed plot draws from a cleared copy and leaves the log as it was ----
    killed = os.path.join(TMP, "killed.h5")
    shutil.copyfile(cnn, killed)
    subprocess.run(["/usr/bin/python3", "-c",
                    "import os, sys, h5py\nf = h5py.File(sys.argv[1], 'r+')\nos.kill(os.getpid(), 9)\n", killed])
    try:
        h5py.File(killed, "r", libver="latest", swmr=True).close()
        check(False, "the killed writer's log opened as SWMR: the case under test did not arise")
    except OSError:
        pass
    with open(killed, "rb") as f:
        before = f.read()
    r = run(["plot", killed, "-o", os.path.join(TMP, "killed_plots")])
    check(r.returncode == 0 and "still marked open for writing" in r.stderr,
          f"a log left open by a killed writer: exit {r.returncode}, {r.stderr!r}")
    check(os.path.exists(os.path.join(TMP, "killed_plots", "losses.png")), "killed writer's log: no losses.png")
    with open(killed, "rb") as f:
        check(f.read() == before, "heed plot changed the log a killed writer left")

    # ---- clear failures ----
    r = run(["plot", os.path.join(TMP, "missing.h5")])
    check(r.returncode == 1 and "missing.h5" in r.stderr and "does not exist" in r.stderr,
          f"a missing file: exit {r.returncode}, {r.stderr!r}")
    r = run(["plot", log], env=dict(os.environ, HEED_PYTHON=os.path.join(TMP, "no-python")))
    check(r.returncode == 1 and "python3-matplotlib" in r.stderr, f"no Python: exit {r.returncode}, {r.stderr!r}")
    # One damaged byte in a dataset's header: h5py in SWMR mode retried that
    # read with sleeps for more than 10 minutes; heed refuses it at once.
    damaged = os.path.join(TMP, "damaged.h5")
    shutil.copy(log, damaged)
    with h5py.File(damaged, "r", libver="latest", swmr=True) as f:
        name = next(n for n in f["metrics"])
        addr = h5py.h5o.get_info(f["metrics/" + name].id).addr
    with open(damaged, "r+b") as f:
        f.seek(addr + 12)
        b = f.read(1)
        f.seek(addr + 12)
        f.write(bytes([b[0] ^ 0xFF]))
    with open(damaged, "rb") as f:
        before = f.read()
    try:
        r = subprocess.run([HEED, "plot", damaged, "-o", os.path.join(TMP, "damaged_plots")], capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 1 and "damaged" in r.stderr and "damaged.h5" in r.stderr,
              f"a log with a damaged dataset header: exit {r.returncode}, {r.stderr!r}")
    except subprocess.TimeoutExpired:
        check(False, "heed plot of a log with a damaged dataset header still ran after 60 s")
    with open(damaged, "rb") as f:
        check(f.read() == before, "heed plot changed the damaged log")
    # A damaged byte that only a read of a dataset's values meets (a
    # tester's log with one flipped byte in a series' chunk index: h5py hung
    # on it for over 15 minutes while heed inspect passed the file). Made
    # here with a checksummed dataset whose data is flipped: heed plot reads
    # every value first and names the dataset.
    bad_values = os.path.join(TMP, "bad_values.h5")
    shutil.copy(lm, bad_values)
    with h5py.File(bad_values, "r+") as f:
        f.create_dataset("series/extra/values", data=np.arange(64, dtype=np.float32).reshape(4, 16), chunks=(4, 16),
                         fletcher32=True)
        f["series/extra/step"] = np.arange(4, dtype=np.int64)
        at = f["series/extra/values"].id.get_chunk_info(0).byte_offset
    with open(bad_values, "r+b") as f:
        f.seek(at + 5)
        b = f.read(1)
        f.seek(at + 5)
        f.write(bytes([b[0] ^ 0xFF]))
    try:
        r = subprocess.run([HEED, "plot", bad_values, "-o", os.path.join(TMP, "bad_values_plots")],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "is damaged" in r.stderr and "series/extra/values" in r.stderr and
              "Traceback" not in r.stderr, f"a log with a damaged dataset's values: exit {r.returncode}, {r.stderr!r}")
    except subprocess.TimeoutExpired:
        check(False, "heed plot of a log with a damaged dataset's values still ran after 60 s")
    # heed inspect reads every value too: the same log is refused, naming the
    # dataset (it passed when inspect read only shapes and attributes).
    r = run(["inspect", bad_values])
    check(r.returncode == 1 and r.stdout == "" and "is damaged: its dataset 'series/extra/values' cannot be read" in
          r.stderr and "Traceback" not in r.stderr, f"heed inspect of a damaged dataset's values: exit {r.returncode}, "
          f"{r.stderr!r}")

    # ---- an interrupted heed plot leaves no copy of the log behind: the
    # killed writer's log is plotted from a copy in the temporary directory,
    # which the SIGTERM that ends the script with heed (PR_SET_PDEATHSIG),
    # or one sent to the script itself, left there (atexit does not run) ----
    private_tmp = os.path.join(TMP, "tmpdir")
    os.makedirs(private_tmp)
    with open(killed, "rb") as f:
        killed_before = f.read()
    for target in ("heed", "the script"):
        p = subprocess.Popen([HEED, "plot", killed, "-o", os.path.join(TMP, "interrupted_plots")],
                             env=dict(os.environ, TMPDIR=private_tmp), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        copies, deadline = [], time.time() + 60
        while not copies and p.poll() is None and time.time() < deadline:
            copies = [n for n in os.listdir(private_tmp) if n.startswith("heed-plot-") and n.endswith(".h5")]
            time.sleep(0.01)
        check(copies, f"interrupting heed plot ({target}): no copy of the log appeared: the case did not arise")
        if target == "heed":
            p.send_signal(signal.SIGTERM)
        else:
            with open(f"/proc/{p.pid}/task/{p.pid}/children") as c:
                for child in c.read().split():
                    os.kill(int(child), signal.SIGTERM)
        p.wait(timeout=60)
        deadline = time.time() + 30  # the script ends just after heed
        while os.listdir(private_tmp) and time.time() < deadline:
            time.sleep(0.05)
        check(os.listdir(private_tmp) == [], f"heed plot interrupted ({target}) left {os.listdir(private_tmp)}")
        for n in os.listdir(private_tmp):
            os.remove(os.path.join(private_tmp, n))
    with open(killed, "rb") as f:
        check(f.read() == killed_before, "an interrupted heed plot changed the log a killed writer left")

    # ---- HEED_PYTHON named with its value, and what is missing ----
    bindir = os.path.join(TMP, "bin")
    os.makedirs(bindir)
    bare = os.path.join(bindir, "python3-bare")  # a Python that sees none of Debian's packages
    with open(bare, "w") as f:
        f.write('#!/bin/sh\nexec /usr/bin/python3 -I -S "$@"\n')
    os.chmod(bare, 0o755)
    r = run(["plot", log], env=dict(os.environ, HEED_PYTHON="python3-bare", PATH=bindir + ":" + os.environ["PATH"]))
    check(r.returncode == 1 and r.stderr.startswith("heed: plot: HEED_PYTHON='python3-bare' (") and
          "cannot import numpy, h5py, matplotlib" in r.stderr and "unset HEED_PYTHON" in r.stderr and
          "needs" not in r.stderr, f"HEED_PYTHON a Python without the packages: exit {r.returncode}, {r.stderr!r}")
    # A program that is no Python: a shell's complaints about the script's
    # lines were the message (60 lines); /bin/true drew nothing, status 0.
    for program in ("/bin/sh", "/bin/true"):
        out_dir = os.path.join(TMP, "not_python_plots")
        r = run(["plot", log, "-o", out_dir], env=dict(os.environ, HEED_PYTHON=program))
        check(r.returncode == 1 and r.stderr.startswith(f"heed: plot: HEED_PYTHON='{program}' cannot run the plotting "
                                                        "script (exit status ") and
              "expected a Python 3 interpreter" in r.stderr and r.stderr.count("\n") == 1 and
              not os.path.exists(out_dir), f"HEED_PYTHON={program}: exit {r.returncode}, {r.stderr!r}")
    r = run(["plot", log], env=dict(os.environ, HEED_PYTHON="/etc/passwd"))
    check(r.returncode == 1 and "HEED_PYTHON='/etc/passwd' is not an executable program" in r.stderr,
          f"HEED_PYTHON=/etc/passwd: exit {r.returncode}, {r.stderr!r}")

    # ---- a HOME whose Matplotlib directories cannot be written: the real
    # error comes first (it came after Matplotlib's warning about its cache) ----
    home_env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    home_env.update(HOME="/proc/heed-no-home", TMPDIR=private_tmp)
    r = run(["plot", log, "-o", "/proc/heed-no-plots"], env=home_env)
    check(r.returncode == 1 and r.stderr.startswith("heed: plot: cannot create the directory '/proc/heed-no-plots'")
          and r.stderr.count("\n") == 1 and "Matplotlib" not in r.stderr,
          f"an unwritable HOME and -o: exit {r.returncode}, {r.stderr!r}")
    r = run(["plot", cnn, "-o", os.path.join(TMP, "nohome_plots")], env=home_env)
    check(r.returncode == 0 and "Matplotlib" not in r.stderr, f"an unwritable HOME: exit {r.returncode}, {r.stderr!r}")
    check(os.listdir(private_tmp) == [], f"heed plot with an unwritable HOME left {os.listdir(private_tmp)}")

    # ---- an HDF5 file that is not a heed log: refused as heed inspect calls
    # it (heed plot drew an empty figure and exited 0) ----
    foreign = os.path.join(TMP, "foreign.h5")
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    r = run(["plot", foreign])
    check(r.returncode == 1 and "is an HDF5 file that is not a heed log or checkpoint" in r.stderr and
          not os.path.exists(os.path.join(TMP, "foreign_plots")), f"a foreign HDF5 file: exit {r.returncode}, "
          f"{r.stderr!r}")
    r = run(["inspect", foreign])
    check(r.returncode == 0 and "not a heed log or checkpoint" in r.stdout, f"heed inspect of it: {r.stdout!r}")

    # ---- text attributes h5py writes from bytes (variable-length ASCII):
    # read as the UTF-8 ones (both said "damaged: HDF5's structure cannot be read") ----
    ascii_log = os.path.join(TMP, "ascii.h5")
    shutil.copyfile(cnn, ascii_log)
    with h5py.File(ascii_log, "r+") as f:
        f.attrs["experiment"] = b"shapes"
        f["metrics"].attrs["note"] = b"edited"
        check(h5py.check_string_dtype(f.attrs.get_id("experiment").dtype).encoding == "ascii",
              "the edited attribute is not ASCII text: the case is not tested")
    r = run(["inspect", ascii_log])
    check(r.returncode == 0 and "experiment: shapes" in r.stdout and "edited" in r.stdout,
          f"heed inspect of ASCII text attributes: exit {r.returncode}, {r.stderr!r}")
    check(sorted(os.path.basename(x) for x in plot(ascii_log)) == sorted(CNN_SIZES),
          "heed plot of ASCII text attributes: not the shapes figures")

    # ---- a sweep stopped before the shapes model's cells: its panels say so,
    # with no float32 line drawn through the words ----
    partial = os.path.join(TMP, "partial.h5")
    shutil.copyfile(comp, partial)
    with h5py.File(partial, "r+") as f:
        for method in methods:
            for k in list(f[f"metrics/shapes/{method}"]):
                del f[f"metrics/shapes/{method}/{k}"]
                f.create_dataset(f"metrics/shapes/{method}/{k}", shape=(0, 3), maxshape=(None, 3), dtype=np.float64)
    plot(partial)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "plot"))
    import heed_plot
    heed_plot.import_modules()
    drawn = {}
    heed_plot.save = lambda fig, out_dir, name, written: drawn.update({name: fig})
    with h5py.File(partial, "r") as f:
        heed_plot.plot_compression(f, TMP, heed_plot.Written())
    panels = [ax for ax in drawn["compression.png"].axes if ax.get_title().startswith("shapes:")]
    check(len(panels) == 3 and all(not ax.get_lines() for ax in panels) and
          all("no quantized model measured yet" in " ".join(t.get_text() for t in ax.texts) for ax in panels),
          f"a sweep without shapes cells: panels {[(ax.get_title(), len(ax.get_lines())) for ax in panels]}")
finally:
    shutil.rmtree(TMP, ignore_errors=True)

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("plot.renders: all figures drawn with the expected sizes")
