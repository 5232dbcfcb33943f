#!/usr/bin/python3
"""heed_plot.py: draws a heed run log (docs/log-format.md) as PNG figures.

    /usr/bin/python3 experiments/plot/heed_plot.py runs/demo.h5 [-o DIR]

`heed plot` runs this script; it can also be run directly. It needs Debian's
python3-h5py and python3-matplotlib, so run it with /usr/bin/python3 (a
python3 earlier on PATH may not see them). The log is opened as a SWMR
reader, so a run that is still writing can be drawn at any time. Every file
written is printed on its own line, and nothing else goes to stdout.

What is drawn depends on the log's `experiment` attribute:
  shapes   losses.png (training loss per step, train and test MSE per epoch,
           one colour per model), pair_score.png, sample_<i>.png (input,
           target and each model's output) and attention_<i>.png (the
           attention map with the shapes marked) for the first 6 samples
  charlm   losses.png (train/val loss, learning rate, gradient norm,
           tokens per second), attention_layer<L>.png (one heatmap per head
           for the probe text) and heads.png (per-head statistics, layers x
           heads, against uniform attention)
  attend   attention_grid.png (heed attend: every head over the prompt)
  scaling  saturation.png (score variance, softmax entropy, largest weight
           and gradient against d_k, scaled and unscaled) and training.png
           (loss and accuracy of the copy task, scaled and unscaled)
  compression  compression.png: each model's quality (validation loss; test
           MSE and pair-attention score) and relative weight error against
           the bits per weight actually stored, one line per method, the
           float32 model dashed
  timeseries, crossattn   see heed_plot_signals.py
  other    metrics.png, every metric of the log
A dataset that is missing (a CNN-only run has no attention maps) is skipped,
as is one whose shape or type is not the experiment's (with one line on
stderr naming it, its shape and the shape expected: see fits). Then, for every log, each
series named like attention maps that no figure above drew (a user's own
program's, whatever its experiment is called) gets a figure of its own,
named after the series (see plot_series_maps).

Figures are saved at a fixed size (FIG_DPI times the sizes below, no tight
cropping) so the tests know each PNG's pixel size.

Exit status: 0 done; 2 a problem explained in one message on stderr (a
missing file, not a heed log, a missing Python module, a timeseries period
<= 0).
"""

import math
import os
import re
import sys

FIG_DPI = 100
# Figure sizes in inches (pixels = 100 x inches).
SIZE_LOSSES = (12, 4.5)        # shapes: 1200 x 450
SIZE_PAIR_SCORE = (6, 4)       # 600 x 400
SIZE_SAMPLE = (10, 4.5)        # 1000 x 450
SIZE_ATTENTION = (7, 8)        # 700 x 800
SIZE_LM_LOSSES = (12, 8)       # charlm: 1200 x 800
LM_HEAD_SIZE = (4, 4.5)        # charlm attention: 400 x 450 pixels per head, up to 4 heads a row
SIZE_METRIC_ROW = (12, 3.5)    # other experiments: 1200 x 350 per row of 3 metrics
SIZE_COMPRESSION_ROW = (15, 4.5)  # compression: 1500 x 450 per model
METHOD_COLOURS = {"uniform": "tab:blue", "hadamard": "tab:orange", "gaussian": "tab:green", "e8": "tab:red",
                  "lplr": "tab:purple"}
N_SAMPLES = 6

MODEL_COLOURS = {"cnn": "tab:blue", "attention": "tab:red"}
OTHER_COLOURS = ["tab:green", "tab:purple", "tab:brown", "tab:olive", "tab:cyan"]
KIND_STYLE = {0: ("^", "tab:orange", "triangle"), 1: ("s", "tab:green", "box")}


def die(message):
    print(message, file=sys.stderr)
    sys.exit(2)


# ---- temporary files, removed however the script ends ------------------------------

TEMPORARY = []  # paths of files and directories this script made


def remove_temporary():
    import shutil
    while TEMPORARY:
        path = TEMPORARY.pop()
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.remove(path)
        except OSError:
            pass


def remove_temporary_on_signals():
    """SIGTERM (what heed's end sends, end_with_parent; kill's default),
    SIGINT and SIGHUP end the script through SystemExit, so its temporary
    files go as at a normal exit: by default they end Python at once."""
    import atexit
    import signal
    atexit.register(remove_temporary)

    def stop(signum, _frame):
        remove_temporary()
        signal.signal(signum, signal.SIG_DFL)
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(sig, stop)


def private_matplotlib_dir():
    """Matplotlib keeps its configuration and font cache in $MPLCONFIGDIR, else
    under $HOME (~/.config/matplotlib, ~/.cache/matplotlib). Where those
    cannot be written (a HOME of another user), it warns on stderr, and that
    warning came first in heed's messages: a directory of the script's own
    is used instead, removed at the end."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    home = os.path.expanduser("~")
    for var, default in (("XDG_CONFIG_HOME", ".config"), ("XDG_CACHE_HOME", ".cache")):
        d = os.path.join(os.environ.get(var) or os.path.join(home, default), "matplotlib")
        try:
            os.makedirs(d, exist_ok=True)
        except OSError:
            pass
        if not (os.path.isdir(d) and os.access(d, os.W_OK)):
            import tempfile
            try:
                private = tempfile.mkdtemp(prefix="heed-plot-matplotlib-")
            except OSError:
                return  # Matplotlib then says what it does itself
            TEMPORARY.append(private)
            os.environ["MPLCONFIGDIR"] = private
            return


def python_words():
    """The interpreter, as the user chose it: HEED_PYTHON's value when set."""
    chosen = os.environ.get("HEED_PYTHON")
    if chosen:
        shown = f"HEED_PYTHON='{chosen}'"
        return shown if os.path.abspath(chosen) == sys.executable else f"{shown} ({sys.executable})"
    return sys.executable


# What `heed_plot.py --check-modules` prints when the modules import
# (experiments/plot.cpp looks for the same words).
CHECKED = "heed_plot.py: the modules import"


def import_modules():
    private_matplotlib_dir()  # before Matplotlib is imported: it looks at its directories then
    missing = []
    for module, package in (("numpy", "python3-numpy"), ("h5py", "python3-h5py"),
                            ("matplotlib", "python3-matplotlib")):
        try:
            __import__(module)
        except ImportError:
            missing.append((module, package))
    if missing:
        other = os.environ.get("HEED_PYTHON")
        die("plot: {} cannot import {}: install the Debian package{} {} (apt-get install {}){}".format(
            python_words(), ", ".join(m for m, _ in missing), "s" if len(missing) > 1 else "",
            ", ".join(p for _, p in missing), " ".join(p for _, p in missing),
            ", or unset HEED_PYTHON to use /usr/bin/python3" if other else ""))
    import matplotlib
    matplotlib.use("Agg")


# ---- reading the log ---------------------------------------------------------

def open_log(path):
    import h5py
    # Only a missing file "does not exist": no permission, a loop of symbolic
    # links, ... are named in the operating system's words.
    # (O_NONBLOCK: a FIFO without a writer is not waited on.)
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except FileNotFoundError:
        die(f"plot: '{path}' does not exist")
    except OSError as e:
        die(f"plot: cannot open '{path}': {e.strerror or e}")
    import stat
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        die(f"plot: '{path}' is a directory, expected an HDF5 run log")
    if not stat.S_ISREG(mode):  # HDF5 would wait on a FIFO for ever
        die(f"plot: '{path}' is not a regular file (a FIFO, device or socket); expected an HDF5 run log")
    try:
        return h5py.File(path, "r", libver="latest", swmr=True)
    except OSError:
        pass
    try:
        return h5py.File(path, "r")
    except OSError as e:
        first_error = e
    # Still marked open for writing (a run killed while resuming, before SWMR
    # began): read a private copy with the mark cleared, as `heed inspect`
    # does; the log itself stays as it is.
    copy = cleared_copy(path)
    if copy is not None:
        try:
            f = h5py.File(copy, "r")
            print(f"plot: '{path}' is still marked open for writing (its writer was killed); "
                  "plotting a copy with the mark cleared", file=sys.stderr)
            return f
        except OSError:
            pass
    die(f"plot: cannot open '{path}' as an HDF5 file (not HDF5, truncated, or open in a writer "
        f"that is not in SWMR mode): {first_error}")


def marked_open_whole(path):
    """True when path's superblock (version 2 or 3) carries a writer's "open
    for writing" mark and the file is as long as the end of file it records:
    left open by a killed writer, not cut short (clearing a truncated file
    would make its missing bytes read as zeros)."""
    try:
        with open(path, "rb") as f:
            sb = f.read(36)
    except OSError:
        return False
    if len(sb) < 36 or sb[:8] != b"\x89HDF\r\n\x1a\n" or sb[8] < 2 or sb[9] != 8 or sb[11] == 0:
        return False
    return os.path.getsize(path) >= int.from_bytes(sb[28:36], "little")


def cleared_copy(path):
    """A temporary copy of path with HDF5's "open for writing" mark cleared
    (h5clear -s --increment), removed at exit; None when that fails or the
    file is not one a killed writer left whole."""
    if not marked_open_whole(path):
        return None
    import shutil
    import subprocess
    import tempfile
    fd, copy = tempfile.mkstemp(prefix="heed-plot-", suffix=".h5")
    os.close(fd)
    TEMPORARY.append(copy)  # removed at exit, also one a signal causes (remove_temporary_on_signals)
    try:
        shutil.copyfile(path, copy)
        done = subprocess.run(["h5clear", "-s", "--increment", copy], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    except OSError:
        return None
    return copy if done.returncode == 0 else None


def text_attr(obj, name, default=None):
    if obj is None or name not in obj.attrs:
        return default
    v = obj.attrs[name]
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if hasattr(v, "item"):
        v = v.item()
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
    return str(v)


# ---- what a log's datasets must look like -------------------------------------------
#
# A log edited by hand (or written by a program of one's own) may hold a
# dataset of another shape or type than the figure expects. Every dataset a
# figure reads is checked against the shape it expects, written like the
# tables of docs/log-format.md: "[S, T]" (named sizes; a name bound by one
# dataset must match in the next ones the figure reads, through the dims it
# passes; n, the rows, is each dataset's own), "[2, D]" (a fixed size),
# "[..., T, S]" (any leading sizes). One
# that does not fit is skipped, as a missing one is, with one line on stderr
# naming it, its shape, the shape expected and the figure it is left out of
# (a series of a program of one's own may still get a figure of its own,
# plot_series_maps).

NOTED = set()
READ = []  # (path, shape) of every dataset read for the figure being drawn
DRAWING = ["the figures"]  # the figure being drawn, for messages


def note(message):
    """One line on stderr (once per message): something of the log that is skipped."""
    if message not in NOTED:
        NOTED.add(message)
        print(f"plot: {message}", file=sys.stderr, flush=True)


def shape_text(shape):
    return "[" + ", ".join(str(int(n)) for n in shape) + "]"


def numeric(dtype):
    return dtype.kind in "biuf"


def fits(path, shape, dtype, spec, dims):
    """Whether a dataset of shape and dtype fits spec ("[S, T]", see above);
    binds spec's names in dims (name -> (size, path)). Notes it when not."""
    names = [t.strip() for t in spec.strip("[]").split(",") if t.strip()]
    lead = "..." in names  # at the start or at the end: any sizes there
    at_end = lead and names[-1] == "..."
    names = [n for n in names if n != "..."]
    ok = numeric(dtype) and (len(shape) >= len(names) if lead else len(shape) == len(names))
    bound, clash = {}, None
    if ok:
        for name, size in zip(names, shape[:len(names)] if at_end else shape[len(shape) - len(names):]):
            if name == "n":  # a series' or metric's rows: any number, in each dataset its own
                continue
            want = int(name) if name.isdigit() else dims[name][0] if name in dims else bound.get(name)
            if want is None:
                bound[name] = int(size)
            elif int(size) != want:
                ok, clash = False, name
                break
    if ok:
        dims.update({name: (size, path) for name, size in bound.items()})
        return True
    given = [f"{clash} = {dims[clash][0]} as in '{dims[clash][1]}'"] if clash in dims else []
    what = f"has shape {shape_text(shape)}" if numeric(dtype) else f"holds {dtype} values"
    note(f"'{path}' {what}, expected {spec}" + (f" ({', '.join(given)})" if given else "") +
         f": left out of {DRAWING[-1]}")
    return False


def dataset(f, path):
    import h5py
    ds = f.get(path)
    if not isinstance(ds, h5py.Dataset):
        return None
    try:
        ds.refresh()  # a SWMR reader sees rows appended since the file was opened
    except Exception:
        pass
    READ.append((path, ds.shape))
    return ds


def metric(f, name):
    """metrics/<name> as an array of rows (step, value, wall_seconds), or None."""
    path = "metrics/" + name
    ds = dataset(f, path)
    if ds is None or not fits(path, ds.shape, ds.dtype, "[n, 3]", {}) or ds.shape[0] == 0:
        return None
    return ds[()]


def series_rows(f, name, item, dims):
    """(values, steps, n) of series/<name> whose values' rows fit item (a
    spec, for values[i]), or None."""
    values, steps = dataset(f, f"series/{name}/values"), dataset(f, f"series/{name}/step")
    if values is None or steps is None:
        return None
    if not fits(f"series/{name}/step", steps.shape, steps.dtype, "[n]", {}):
        return None
    if item is not None and not fits(f"series/{name}/values", values.shape, values.dtype,
                                     "[n, " + item.strip("[]") + "]" if item.strip("[]") else "[n]", dims):
        return None
    if item is None and not fits(f"series/{name}/values", values.shape, values.dtype, "[n, ...]", {}):
        return None
    n = min(values.shape[0], steps.shape[0])  # a live writer appends the step first
    return (values, steps, n) if n > 0 else None


def series_last(f, name, item=None, dims=None):
    """(step, tensor) of the last row of series/<name>, or None; item: the
    spec the row must fit (None: any)."""
    rows = series_rows(f, name, item, {} if dims is None else dims)
    if rows is None:
        return None
    values, steps, n = rows
    return int(steps[n - 1]), values[n - 1]


def fixed(f, path, spec=None, dims=None):
    """The values of the dataset at path, or None when it is missing or does
    not fit spec (None: any numeric dataset)."""
    ds = dataset(f, path)
    if ds is None:
        return None
    if not fits(path, ds.shape, ds.dtype, spec if spec is not None else "[...]", {} if dims is None else dims):
        return None
    return ds[()]


def int_attr(obj, name, default=None, low=None):
    """An attribute holding an integer (as text or a number), at least low;
    default (noted) when it holds something else."""
    v = text_attr(obj, name)
    if v is None:
        return default
    try:
        i = int(v)
        if low is None or i >= low:
            return i
    except ValueError:
        pass
    note(f"ignored the attribute '{name}' = {v[:40]!r}: expected an integer" +
         (f" >= {low}" if low is not None else ""))
    return default


FIGURE_ERRORS = (ArithmeticError, IndexError, KeyError, LookupError, TypeError, ValueError)


def figure(name):
    """Decorates a function that draws one figure (name, for messages): when
    the log's datasets fit their shapes one by one but not together (a map
    shorter than its signal), the figure is skipped with one line naming
    the datasets it read, not a traceback."""
    def wrap(draw):
        import functools

        @functools.wraps(draw)
        def guarded(*args, **kw):
            READ.clear()
            what = name(*args, **kw) if callable(name) else name
            DRAWING.append(what)
            try:
                return draw(*args, **kw)
            except FIGURE_ERRORS as e:
                import matplotlib.pyplot as plt
                plt.close("all")
                read = ", ".join(f"'{p}' {shape_text(s)}" for p, s in dict(READ).items())
                note(f"skipped {what}: the log's datasets do not fit together ({read or 'none read'}): "
                     f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": "))
                return None
            finally:
                DRAWING.pop()
        return guarded
    return wrap


# ---- drawing helpers -----------------------------------------------------------

class Written(list):
    """The files written, in order, and in .series the names of the series
    drawn into them (or known not to be maps): plot_series_maps draws the
    log's other attention series after the experiment's figures."""

    def __init__(self):
        super().__init__()
        self.series = set()


def new_figure(size):
    import matplotlib.pyplot as plt
    return plt.figure(figsize=size, dpi=FIG_DPI, layout="constrained")


def mark_lone_points(fig):
    """A line through one point draws nothing (a metric logged once, a run
    stopped after one step): such lines get a marker, in every figure."""
    for ax in fig.axes:
        for line in ax.get_lines():
            if len(line.get_xdata()) == 1 and line.get_marker() in (None, "", " ", "None", "none"):
                line.set_marker("o")
                line.set_markersize(5)


def save(fig, out_dir, name, written):
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.text import Text
    path = os.path.join(out_dir, name)
    mark_lone_points(fig)
    # Every text drawn literally: a probe text, prompt, file or series name
    # holding '$' ("$a^$b") was parsed as math, which failed with a
    # traceback or drew "$x$" as an italic x. No figure uses math.
    # Tick labels are matplotlib's own: a log axis's formatter writes them as
    # math ("$\\mathdefault{2^{3}}$"), drawn raw once math is off. They get
    # plain numbers ("8", "0.001") instead.
    from matplotlib.ticker import FuncFormatter, LogFormatter, NullFormatter
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if isinstance(axis.get_major_formatter(), LogFormatter):
                axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            if isinstance(axis.get_minor_formatter(), LogFormatter):
                axis.set_minor_formatter(NullFormatter())
    for t in fig.findobj(Text):
        t.set_parse_math(False)
    # One draw, not two: with a layout engine set, savefig draws the whole
    # figure once without rendering (for the layout's text sizes) and then
    # again to render it. The layout computed here and the engine then
    # removed, savefig draws once: the same PNG, byte for byte, in 15-25%
    # less time (a shapes log's 14 figures, alternating runs).
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
        with matplotlib.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
            fig.set_layout_engine(None)  # None with those two off: no engine at all
    try:
        fig.savefig(path, dpi=FIG_DPI)
    except OSError as e:  # an unwritable directory, a full disk: one line, not a traceback
        print(f"plot: cannot write '{path}': {e.strerror or e}", file=sys.stderr)
        sys.exit(2)
    # What was drawn (tick labels exist from the draw on): math markup drawn
    # as text is a figure's bug, said rather than shipped silently.
    raw = sorted({t.get_text() for t in fig.findobj(Text) if "\\mathdefault" in t.get_text()})
    if raw:
        print(f"plot: {name}: labels drawn as raw math markup: {', '.join(raw[:3])}", file=sys.stderr)
    plt.close(fig)
    written.append(path)
    print(path, flush=True)


SMOOTH_FROM = 80  # rows from which smooth() averages (below, it returns the rows)


def smooth(values):
    """Centred moving average over ~n/40 rows (narrower at the ends), so the
    smoothed curve does not lag behind the raw one as an EMA would."""
    import numpy as np
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    half = max(0, n // SMOOTH_FROM)
    if half == 0:
        return v
    c = np.concatenate([[0.0], np.cumsum(v)])
    i = np.arange(n)
    lo, hi = np.maximum(0, i - half), np.minimum(n, i + half + 1)
    return (c[hi] - c[lo]) / (hi - lo)


def log_y_if_positive(ax, arrays):
    """Log scale when every value is positive, with plain-number tick labels
    (also at 2x and 5x when the data spans few decades)."""
    import numpy as np
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    vals = [np.asarray(a) for a in arrays if a is not None and len(a)]
    if not vals or not all(np.nanmin(v) > 0 for v in vals):
        return False
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    lo, hi = min(np.nanmin(v) for v in vals), max(np.nanmax(v) for v in vals)
    if hi / lo < 1e3:
        ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        ax.yaxis.set_minor_formatter(plain)
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())
    return True


def not_logged(ax, what):
    ax.text(0.5, 0.5, f"{what}: not logged", ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def model_colour(name, i):
    return MODEL_COLOURS.get(name, OTHER_COLOURS[i % len(OTHER_COLOURS)])


# ---- the shapes experiment -------------------------------------------------------

def shapes_models(f):
    """Models with a metrics/<model>/ group, CNN first."""
    import h5py
    g = f.get("metrics")
    if not isinstance(g, h5py.Group):
        return []
    names = [k for k in g.keys() if isinstance(g[k], h5py.Group) and "train_loss" in g[k]]
    order = {"cnn": 0, "attention": 1}
    return sorted(names, key=lambda n: (order.get(n, 2), n))


def steps_per_epoch(f):
    train, batch = int_attr(f, "config.train", low=1), int_attr(f, "config.batch", low=1)
    return math.ceil(train / batch) if train and batch else None


@figure("losses.png")
def shapes_losses(f, models, out_dir, written):
    fig = new_figure(SIZE_LOSSES)
    ax_step, ax_epoch = fig.subplots(1, 2)
    spe = steps_per_epoch(f)
    plotted_step, plotted_epoch = [], []
    smoothed = False
    for i, m in enumerate(models):
        colour = model_colour(m, i)
        tl = metric(f, f"{m}/train_loss")
        if tl is not None:
            ax_step.plot(tl[:, 0], tl[:, 1], color=colour, alpha=0.25, lw=0.8)
            ax_step.plot(tl[:, 0], smooth(tl[:, 1]), color=colour, lw=1.8, label=m)
            plotted_step.append(tl[:, 1])
            smoothed = smoothed or len(tl) >= SMOOTH_FROM
        for suffix, style, marker in (("train_mse", "--", "o"), ("test_mse", "-", "s")):
            r = metric(f, f"{m}/{suffix}")
            if r is None:
                continue
            x = r[:, 0] / spe if spe else r[:, 0]
            ax_epoch.plot(x, r[:, 1], ls=style, marker=marker, ms=4, color=colour,
                          label=f"{m} {suffix.split('_')[0]}")
            plotted_epoch.append(r[:, 1])
    if plotted_step:
        log = log_y_if_positive(ax_step, plotted_step)
        ax_step.set_xlabel("step")
        ax_step.set_ylabel("MSE loss" + (" (log scale)" if log else ""))
        ax_step.set_title("training loss per step" + (" (light: raw, dark: smoothed)" if smoothed else ""))
        ax_step.legend()
        ax_step.grid(True, which="both", alpha=0.3)
    else:
        not_logged(ax_step, "training loss")
    if plotted_epoch:
        log = log_y_if_positive(ax_epoch, plotted_epoch)
        ax_epoch.set_xlabel("epoch" if spe else "step")
        ax_epoch.set_ylabel("MSE" + (" (log scale)" if log else ""))
        ax_epoch.set_title("MSE per epoch: train (dashed), test (solid)")
        ax_epoch.legend()
        ax_epoch.grid(True, which="both", alpha=0.3)
    else:
        not_logged(ax_epoch, "MSE per epoch")
    fig.suptitle(f"{os.path.basename(f.filename)}: shapes, {', '.join(models) or 'no models'}")
    save(fig, out_dir, "losses.png", written)


@figure("pair_score.png")
def shapes_pair_score(f, out_dir, written):
    r = metric(f, "attention/pair_score")
    if r is None:
        return
    fig = new_figure(SIZE_PAIR_SCORE)
    ax = fig.subplots()
    ax.plot(r[:, 0], r[:, 1], "-o", ms=4, color=MODEL_COLOURS["attention"])
    ax.set_ylim(0, 1)
    ax.set_xlabel("step")
    ax.set_ylabel("attention mass on the partner shape")
    ax.set_title("pair-attention score (1: each shape attends only to its partner)", fontsize=10)
    ax.grid(True, alpha=0.3)
    save(fig, out_dir, "pair_score.png", written)


class Shapes:
    """Geometry of one logged sample: centres, widths, kinds, partners."""

    def __init__(self, f, i, dims=None):
        dims = {} if dims is None else dims
        self.centres = fixed(f, "samples/centres", "[S, K]", dims)
        self.kinds = fixed(f, "samples/kinds", "[S, K]", dims)
        self.partner = fixed(f, "samples/partner", "[S, K]", dims)
        ok = all(a is not None and len(a) > i for a in (self.centres, self.kinds, self.partner))
        if ok:
            self.centres, self.kinds, self.partner = self.centres[i], self.kinds[i], self.partner[i]
        else:
            self.centres = self.kinds = self.partner = []

    def __iter__(self):
        for s in range(len(self.centres)):
            yield s, float(self.centres[s]), int(self.kinds[s]), int(self.partner[s])

    def draw_on_signal(self, ax, y0, depth_unit, length):
        """Markers at the centres on the line y = y0, partners linked by arcs below it."""
        from matplotlib.patches import Arc
        for s, c, k, p in self:
            marker, colour, _ = KIND_STYLE.get(k, ("o", "0.3", "shape"))
            ax.plot([c], [y0], marker=marker, color=colour, ms=8, mec="k", mew=0.6, ls="none", zorder=5)
            if 0 <= p < len(self.centres) and s < p:
                cp = float(self.centres[p])
                depth = depth_unit * (0.6 + 1.4 * abs(cp - c) / length)
                ax.add_patch(Arc(((c + cp) / 2, y0), abs(cp - c), 2 * depth, theta1=180, theta2=360,
                                 color=colour, lw=1.3))
        return y0 - depth_unit * 2.2  # the lowest point drawn


def kind_legend_handles(extra=()):
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], marker=m, color=c, mec="k", mew=0.6, ls="none", ms=8, label=name)
               for m, c, name in KIND_STYLE.values()]
    return handles + list(extra)


@figure("sample_<i>.png")
def shapes_sample(f, i, models, out_dir, written):
    import numpy as np
    dims = {}
    inp = fixed(f, "samples/input", "[S, C, T]", dims)
    tgt = fixed(f, "samples/target", "[S, 1, T]", dims)
    if inp is None or len(inp) <= i:
        return
    length = inp.shape[-1]
    x = np.arange(length)
    fig = new_figure(SIZE_SAMPLE)
    ax = fig.subplots()
    curves = [inp[i, 0]]
    ax.plot(x, inp[i, 0], color="0.6", lw=1.0, label="input")
    if tgt is not None and len(tgt) > i:
        ax.plot(x, tgt[i, 0], color="k", lw=1.4, ls="--", label="target")
        curves.append(tgt[i, 0])
    steps = []
    for j, m in enumerate(models):
        last = series_last(f, f"{m}/output", "[S, 1, T]", dims)
        if last is None or len(last[1]) <= i:
            continue
        step, out = last
        ax.plot(x, out[i, 0], color=model_colour(m, j), lw=1.6, label=f"{m} output")
        curves.append(out[i, 0])
        steps.append(step)
        written.series.add(f"{m}/output")
    top = max(float(np.max(c)) for c in curves)
    unit = 0.07 * max(top, 1.0)
    bottom = Shapes(f, i, dims).draw_on_signal(ax, -unit, unit, length)
    ax.set_ylim(bottom - 0.5 * unit, top + unit)
    ax.set_xlim(-0.5, length - 0.5)
    ax.set_xlabel("position")
    ax.set_ylabel("height")
    when = f"outputs at step {max(steps)}" if steps else "no outputs logged"
    ax.set_title(f"test sample {i}: input, target and {when} (arcs link the shapes averaged together)")
    ax.legend(handles=ax.get_legend_handles_labels()[0] + kind_legend_handles(), loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=9)
    ax.grid(True, alpha=0.3)
    save(fig, out_dir, f"sample_{i}.png", written)


@figure("attention_<i>.png")
def shapes_attention(f, i, out_dir, written):
    import numpy as np
    from matplotlib.lines import Line2D
    dims = {}
    last = series_last(f, "attention/maps", "[S, T, T]", dims)
    if last is None or last[1].ndim != 3 or len(last[1]) <= i:  # [samples, T, T]
        return
    step, maps = last
    a = np.asarray(maps[i], dtype=np.float64)  # [T, T]: row = query, column = key
    length = a.shape[-1]
    inp = fixed(f, "samples/input", "[S, C, T]", dims)
    shapes = Shapes(f, i, dims)

    fig = new_figure(SIZE_ATTENTION)
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 4.2], width_ratios=[24, 1])
    ax_in, ax, cax = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    fig.add_subplot(grid[0, 1]).axis("off")

    # The input above the key axis, with the partner links.
    if inp is not None and len(inp) > i:
        ax_in.plot(np.arange(length), inp[i, 0], color="0.4", lw=1.0)
        top = float(np.max(inp[i, 0]))
        unit = 0.12 * max(top, 1.0)
        bottom = shapes.draw_on_signal(ax_in, -unit, unit, length)
        ax_in.set_ylim(bottom - 0.3 * unit, top + 4 * unit)  # headroom for the legend
    ax_in.set_xlim(-0.5, length - 0.5)
    ax_in.set_ylabel("input")
    ax_in.set_title(f"test sample {i}: attention at step {step}")
    ax_in.tick_params(labelbottom=False)

    im = ax.imshow(a, origin="upper", cmap="viridis", vmin=0.0, vmax=max(float(a.max()), 1e-12),
                   interpolation="nearest", aspect="auto")
    fig.colorbar(im, cax=cax, label="attention weight (each row sums to 1)")
    edge = length - 0.5
    for s, c, k, p in shapes:
        marker, colour, _ = KIND_STYLE.get(k, ("o", "0.3", "shape"))
        # The shape's centre on both axes, drawn over the frame.
        ax.plot([c], [edge], marker=marker, color=colour, ms=9, mec="k", mew=0.6, clip_on=False, zorder=6)
        ax.plot([-0.5], [c], marker=marker, color=colour, ms=9, mec="k", mew=0.6, clip_on=False, zorder=6)
        if 0 <= p < len(shapes.centres):
            # Where this shape's queries should look: the partner's centre.
            cp = float(shapes.centres[p])
            ax.plot([-0.5, cp], [c, c], color=colour, lw=0.9, ls=":", zorder=4)
            ax.plot([cp, cp], [c, edge], color=colour, lw=0.9, ls=":", zorder=4)
            ax.plot([cp], [c], marker="o", mfc="none", mec="white", mew=1.5, ms=13, zorder=5)
    ax.set_xlim(-0.5, edge)
    ax.set_ylim(edge, -0.5)
    ax.tick_params(pad=9)
    ax.set_xlabel("key position (column): where the query looks")
    ax.set_ylabel("query position (row)")
    partner_cell = Line2D([], [], marker="o", mfc="none", mec="0.2", mew=1.5, ms=10, ls="none",
                          label="partner (query row, key column)")
    ax_in.legend(handles=kind_legend_handles([partner_cell]), loc="upper left", fontsize=8, ncol=3,
                 framealpha=0.85)
    save(fig, out_dir, f"attention_{i}.png", written)
    written.series.add("attention/maps")


def plot_shapes(f, out_dir, written):
    models = shapes_models(f)
    shapes_losses(f, models, out_dir, written)
    shapes_pair_score(f, out_dir, written)
    inp = fixed(f, "samples/input", "[S, C, T]")
    n = min(N_SAMPLES, len(inp)) if inp is not None else 0
    for i in range(n):
        shapes_sample(f, i, models, out_dir, written)
    for i in range(n):
        shapes_attention(f, i, out_dir, written)


# ---- language models (experiment "charlm") ------------------------------------------

@figure("losses.png")
def lm_losses(f, out_dir, written):
    fig = new_figure(SIZE_LM_LOSSES)
    (ax_loss, ax_lr), (ax_grad, ax_tok) = fig.subplots(2, 2)
    train, val = metric(f, "train_loss"), metric(f, "val_loss")
    if train is None and val is None:
        not_logged(ax_loss, "loss")
    else:
        if train is not None:
            ax_loss.plot(train[:, 0], train[:, 1], color="tab:blue", alpha=0.25, lw=0.8)
            ax_loss.plot(train[:, 0], smooth(train[:, 1]), color="tab:blue", lw=1.8,
                         label="train (smoothed)" if len(train) >= SMOOTH_FROM else "train")
        if val is not None:
            ax_loss.plot(val[:, 0], val[:, 1], "-o", ms=4, color="tab:red", label="validation")
        log = log_y_if_positive(ax_loss, [r[:, 1] if r is not None else None for r in (train, val)])
        ax_loss.set_ylabel("cross-entropy (nats per character)" + (", log scale" if log else ""))
        ax_loss.set_title("loss")
        ax_loss.legend()
    # The learning rate is a schedule, not a measurement: drawn as it is.
    for ax, name, title, ylabel, log, noisy in (
            (ax_lr, "lr", "learning rate", "learning rate", False, False),
            (ax_grad, "grad_norm", "gradient norm (before clipping)", "L2 norm", True, True),
            (ax_tok, "tokens_per_second", "throughput", "tokens per second", False, True)):
        r = metric(f, name)
        if r is None:
            not_logged(ax, title)
            continue
        smoothed = noisy and len(r) > 50
        ax.plot(r[:, 0], r[:, 1], color="0.4" if smoothed else "k", alpha=0.35 if smoothed else 1.0,
                lw=0.8 if smoothed else 1.5)
        if smoothed:
            ax.plot(r[:, 0], smooth(r[:, 1]), color="k", lw=1.5)
        if log:
            log_y_if_positive(ax, [r[:, 1]])
        ax.set_title(title)
        ax.set_ylabel(ylabel)
    for ax in (ax_loss, ax_lr, ax_grad, ax_tok):
        if ax.has_data():
            ax.set_xlabel("step")
            ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"{os.path.basename(f.filename)}: character language model")
    save(fig, out_dir, "losses.png", written)


def lm_layers(f):
    import h5py
    g = f.get("series/attention")
    if not isinstance(g, h5py.Group):
        return []
    layers = []
    for k in g.keys():
        m = re.fullmatch(r"layer(\d+)", k)
        if m and isinstance(g[k], h5py.Group) and "maps" in g[k]:
            layers.append(int(m.group(1)))
    return sorted(layers)


PROBE_SYMBOLS = {" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5"}  # space, newline and tab as symbols for them
FONTS = {}  # font family (None: the default) -> the FT2Font matplotlib draws it with


def font_has(ch, family=None):
    """Whether the font matplotlib draws text of this family with has a glyph
    for ch. One it lacks is drawn as an empty box, with a UserWarning
    ("Glyph 8203 ... missing from current font") on stderr."""
    if family not in FONTS:
        from matplotlib import font_manager, ft2font
        FONTS[family] = ft2font.FT2Font(font_manager.findfont(font_manager.FontProperties(family=family)))
    return FONTS[family].get_char_index(ord(ch)) != 0


def code_point(ch):
    return f"U+{ord(ch):04X}"


def probe_label(ch):
    """A character of a model's text as a tick label: space, newline and tab
    as symbols; one that would not show (a control or format character such
    as U+200B ZERO WIDTH SPACE) or that the monospace font lacks as its code
    point, U+200B."""
    if ch in PROBE_SYMBOLS:
        return PROBE_SYMBOLS[ch]
    return ch if ch.isprintable() and font_has(ch, "monospace") else code_point(ch)


def drawable(text):
    """text for a title: each character the default font lacks as its code point."""
    return "".join(c if font_has(c) else code_point(c) for c in text)


def label_ticks(ax, labels, fontsize):
    """Both axes of a map over a text labelled with its characters (probe_label);
    the columns' labels upright when one is a code point."""
    ax.set_xticks(range(len(labels)), labels, fontsize=fontsize, fontfamily="monospace",
                  rotation=90 if any(len(l) > 1 for l in labels) else 0)
    ax.set_yticks(range(len(labels)), labels, fontsize=fontsize, fontfamily="monospace")


def heatmap_grid(maps, panels, vmax, title):
    """One heatmap per map of maps[:panels] (heads), up to 4 a row, on one
    colour scale [0, vmax]; title(h) names panel h. Returns (fig, axes, im,
    ncols, nrows), the unused axes switched off."""
    import numpy as np
    ncols = min(panels, 4)
    nrows = math.ceil(panels / ncols)
    fig = new_figure((LM_HEAD_SIZE[0] * ncols, LM_HEAD_SIZE[1] * nrows))
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    im = None
    for h, ax in enumerate(axes):
        if h >= panels:
            ax.axis("off")
            continue
        im = ax.imshow(maps[h], origin="upper", cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_title(title(h))
    return fig, axes, im, ncols, nrows


@figure("attention_layer<L>.png")
def lm_attention(f, layer, out_dir, written):
    import numpy as np
    last = series_last(f, f"attention/layer{layer}/maps", "[H, T, T]")
    if last is None or last[1].ndim != 3:  # [H, T, T]
        return
    step, maps = last
    maps = np.asarray(maps, dtype=np.float64)  # [H, T, T]
    heads, t = maps.shape[0], maps.shape[-1]
    probe = text_attr(f.get("series/attention"), "probe_text") or text_attr(f, "probe_text") or ""
    labels = [probe_label(c) for c in probe] if len(probe) == t and t <= 48 else None
    # One colour scale for every head of the layer, set by rows 1.. : row 0 of
    # a causal map is always 1 and would wash out the rest.
    vmax = max(float(maps[:, 1:].max() if t > 1 else maps.max()), 1e-12)
    fig, axes, im, ncols, nrows = heatmap_grid(maps, heads, vmax, lambda h: f"head {h}")
    for h, ax in enumerate(axes[:heads]):
        if labels:
            label_ticks(ax, labels, 7)
        if h % ncols == 0:
            ax.set_ylabel("query (row)")
        if h // ncols == nrows - 1 or h + ncols >= heads:
            ax.set_xlabel("key (column)")
    fig.colorbar(im, ax=list(axes), shrink=0.9, extend="max" if vmax < 1 else "neither",
                 label="attention weight (rows sum to 1)")
    shown = probe if len(probe) <= 60 else probe[:57] + "..."
    fig.suptitle(f"layer {layer} attention at step {step}" + (f": {drawable(repr(shown))}" if probe else ""))
    save(fig, out_dir, f"attention_layer{layer}.png", written)
    written.series.add(f"attention/layer{layer}/maps")


def series_all(f, name, item=None, dims=None):
    """(steps, values) of every row of series/<name>, or None; item: the spec
    each row must fit (None: any)."""
    rows = series_rows(f, name, item, {} if dims is None else dims)
    if rows is None:
        return None
    values, steps, n = rows
    return steps[:n], values[:n]


HEAD_STAT_TITLES = {"entropy": "entropy (nats)", "distance": "mean distance looked back",
                    "prev": "mass on the previous character", "first": "mass on the first position",
                    "same_char": "mass on earlier same characters", "word_start": "mass on the word's start"}


@figure("heads.png")
def lm_heads(f, out_dir, written):
    """charlm: the per-head statistics of the last evaluation, one L x H panel each."""
    import numpy as np
    names = (text_attr(f.get("heads"), "stats") or "").split()
    uniform = fixed(f, "heads/uniform", "[N]")
    rows, dims = [], {}
    for i, name in enumerate(names):
        last = series_last(f, f"heads/{name}", "[L, H]", dims)
        if last is not None:
            rows.append((i, name, last[0], np.asarray(last[1], dtype=np.float64)))
    if not rows:
        return
    layers, heads = rows[0][3].shape
    fig = new_figure((4 * 3, 1.2 + 0.55 * layers * 2 + 1.5))
    axes = np.atleast_1d(fig.subplots(2, 3, squeeze=False)).ravel()
    for ax, (i, name, step, v) in zip(axes, rows):
        im = ax.imshow(v, cmap="magma", aspect="auto", interpolation="nearest")
        for l in range(layers):
            for h in range(heads):
                ax.text(h, l, f"{v[l, h]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if v[l, h] < (v.min() + v.max()) / 2 else "black")
        base = f" (uniform {uniform[i]:.2f})" if uniform is not None and i < len(uniform) else ""
        ax.set_title(HEAD_STAT_TITLES.get(name, name) + base, fontsize=9)
        ax.set_xticks(range(heads))
        ax.set_yticks(range(layers))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, shrink=0.8)
    for ax in axes[len(rows):]:
        ax.axis("off")
    fig.suptitle(f"what each head does, on fixed validation windows, at step {rows[0][2]}")
    save(fig, out_dir, "heads.png", written)
    written.series.update(f"heads/{name}" for _, name, _, _ in rows)


@figure("attention_grid.png")
def plot_attend(f, out_dir, written):
    """heed attend: every head's map over the prompt, a grid of layers x heads."""
    import numpy as np
    maps = fixed(f, "attention/maps", "[L, H, P, P]")
    if maps is None:
        return
    maps = np.asarray(maps, dtype=np.float64)  # [L, H, P, P]
    layers, heads, t = maps.shape[0], maps.shape[1], maps.shape[-1]
    prompt = text_attr(f, "prompt") or ""
    kinds = (text_attr(f, "kinds") or "").splitlines()
    labels = [probe_label(c) for c in prompt] if len(prompt) == t and t <= 64 else None
    fig = new_figure((3.2 * heads + 1, 3.4 * layers + 0.6))
    axes = np.asarray(fig.subplots(layers, heads, squeeze=False))
    vmax = max(float(maps[:, :, 1:].max()) if t > 1 else 1.0, 1e-12)
    im = None
    for l in range(layers):
        for h in range(heads):
            ax = axes[l, h]
            im = ax.imshow(maps[l, h], cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
            kind = kinds[l * heads + h] if l * heads + h < len(kinds) else ""
            ax.set_title(f"layer {l} head {h}" + (f": {kind}" if kind and kind != "mixed" else ""), fontsize=9)
            if labels:
                label_ticks(ax, labels, 6)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label="attention weight (rows: queries)")
    shown = prompt if len(prompt) <= 70 else prompt[:67] + "..."
    fig.suptitle(f"every head over {drawable(repr(shown))}")
    save(fig, out_dir, "attention_grid.png", written)


@figure("saturation.png, training.png")
def plot_scaling(f, out_dir, written):
    """heed run scaling: saturation against d_k, then training scaled and unscaled."""
    import numpy as np
    dims = {}
    dk = fixed(f, "saturation/dk", "[D]", dims)
    colours = {0: "tab:blue", 1: "tab:red"}
    names = {0: "scaled by 1/sqrt(d_k)", 1: "unscaled"}
    if dk is not None:
        fig = new_figure((12, 8))
        axes = np.atleast_1d(fig.subplots(2, 2, squeeze=False)).ravel()
        panels = [("score_var", "variance of the scores", True), ("entropy", "softmax entropy (nats)", False),
                  ("max_weight", "largest softmax weight", False),
                  ("grad_ratio", "gradient passed to the scores / gradient in", True)]
        for ax, (key, title, logy) in zip(axes, panels):
            v = fixed(f, f"saturation/{key}", "[2, D]", dims)
            if v is None:
                not_logged(ax, key)
                continue
            for variant in (0, 1):
                ax.plot(dk, v[variant], "o-", color=colours[variant], label=names[variant])
            ax.set_xscale("log", base=2)
            if logy:
                log_y_if_positive(ax, [v[0], v[1]])
            ax.set_xlabel("d_k")
            ax.set_title(title)
            ax.grid(alpha=0.3)
        axes[0].legend()
        fig.suptitle("q, k with N(0, 1) entries: what the softmax sees as d_k grows")
        save(fig, out_dir, "saturation.png", written)
    # prev_token_attention ([2, seeds]: per variant and seed, the attention
    # mass on the previous token) is a score, not a map: no figure draws it.
    written.series.add("prev_token_attention")
    loss = series_all(f, "losses", "[2, R]", dims)
    acc = series_all(f, "accuracy", "[2, R]", dims)
    if loss is None:
        return
    written.series.update(("losses", "accuracy"))
    fig = new_figure((12, 4.5))
    ax1, ax2 = fig.subplots(1, 2)
    steps, values = loss
    for variant in (0, 1):
        for seed in range(values.shape[2]):
            ax1.plot(steps, smooth(values[:, variant, seed]), color=colours[variant], alpha=0.8,
                     label=names[variant] if seed == 0 else None)
    log_y_if_positive(ax1, [values.ravel()])
    ax1.set_xlabel("step")
    ax1.set_title("training loss (one line per seed)")
    ax1.legend()
    ax1.grid(alpha=0.3)
    if acc is not None:
        steps, values = acc
        for variant in (0, 1):
            for seed in range(values.shape[2]):
                ax2.plot(steps, values[:, variant, seed], "o-", color=colours[variant], alpha=0.8, markersize=3,
                         label=names[variant] if seed == 0 else None)
        ax2.set_ylim(0, 1.02)
        ax2.set_xlabel("step")
        ax2.set_title("accuracy on fresh batches")
        ax2.legend()
        ax2.grid(alpha=0.3)
    else:
        not_logged(ax2, "accuracy")
    fig.suptitle("copy-previous-token with one wide head, scaled and unscaled, same weights and batches")
    save(fig, out_dir, "training.png", written)


def plot_charlm(f, out_dir, written):
    lm_losses(f, out_dir, written)
    for layer in lm_layers(f):
        lm_attention(f, layer, out_dir, written)
    lm_heads(f, out_dir, written)


# ---- any other log ---------------------------------------------------------------

# ---- quantization sweeps (experiment "compression") -----------------------------------

COMPRESSION_LABELS = {"val_loss": "validation loss (nats per character)", "test_mse": "test MSE",
                      "pair_score": "pair-attention score", "rel_error": "relative error ||W - W'|| / ||W||"}


@figure("compression.png")
def plot_compression(f, out_dir, written):
    import h5py
    models = [m for m in (text_attr(f, "models", "") or "").split(",") if m]
    methods = [m for m in (text_attr(f, "methods", "") or "").split(",") if m]
    if not models or not methods:
        return
    rows = []
    for model in models:
        g = f.get(f"baseline/{model}")
        quality = sorted(g.keys()) if isinstance(g, h5py.Group) else []
        quality.sort(key=lambda k: (k != "val_loss" and k != "test_mse", k))
        rows.append((model, quality + ["rel_error"]))
    ncols = max(len(panels) for _, panels in rows)
    fig = new_figure((SIZE_COMPRESSION_ROW[0], SIZE_COMPRESSION_ROW[1] * len(rows)))
    axes = fig.subplots(len(rows), ncols, squeeze=False)
    for r, (model, panels) in enumerate(rows):
        for c, name in enumerate(panels):
            ax = axes[r][c]
            drawn = False
            for method in methods:
                bpw, value, bits = (metric(f, f"{model}/{method}/{k}") for k in ("bits_per_weight", name, "bits"))
                if bpw is None or value is None:
                    continue
                n = min(len(bpw), len(value))
                ax.plot(bpw[:n, 1], value[:n, 1], "-o", ms=4, color=METHOD_COLOURS.get(method, "k"), label=method)
                if bits is not None:
                    for x, y, b in zip(bpw[:n, 1], value[:n, 1], bits[:n, 1]):
                        ax.annotate(f"{int(b)}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7,
                                    color=METHOD_COLOURS.get(method, "k"))
                drawn = True
            base = fixed(f, f"baseline/{model}/{name}", "[1]")
            if not drawn:
                # A sweep stopped before this model's cells (--stop-after; its
                # resume adds them) has declared their datasets, with no rows.
                declared = any(isinstance(f.get(f"metrics/{model}/{method}/{name}"), h5py.Dataset)
                               for method in methods)
                ax.set_title(f"{model}: {COMPRESSION_LABELS.get(name, name).split(' (')[0]}")
                float32 = "" if base is None else f"\n(float32: {float(base.ravel()[0]):.4g})"
                if declared:
                    ax.text(0.5, 0.5, f"{name}: no quantized model measured yet{float32}", ha="center", va="center",
                            transform=ax.transAxes, color="0.4")
                    ax.set_xticks([])
                    ax.set_yticks([])
                else:
                    not_logged(ax, name)
                continue
            if base is not None:
                ax.axhline(float(base.ravel()[0]), color="k", ls="--", lw=1, label="float32")
            if name in ("test_mse", "rel_error"):
                log_y_if_positive(ax, [l.get_ydata() for l in ax.get_lines()])
            ax.set_xlabel("bits per weight (codes, ranges, signs)")
            ax.set_ylabel(COMPRESSION_LABELS.get(name, name))
            ax.set_title(f"{model}: {COMPRESSION_LABELS.get(name, name).split(' (')[0]}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        for c in range(len(panels), ncols):
            axes[r][c].axis("off")
    fig.suptitle(f"{os.path.basename(f.filename)}: quantized models against bits per weight (labels: bits per code)")
    save(fig, out_dir, "compression.png", written)


def all_metrics(f):
    import h5py
    names = []
    g = f.get("metrics")
    if isinstance(g, h5py.Group):
        g.visit(lambda n: names.append(n) if isinstance(g[n], h5py.Dataset) else None)
    return sorted(n for n in names if metric(f, n) is not None)


@figure("metrics.png")
def plot_metrics(f, out_dir, written):
    import numpy as np
    names = all_metrics(f)
    if not names:
        return
    ncols = 3
    nrows = math.ceil(len(names) / ncols)
    fig = new_figure((SIZE_METRIC_ROW[0], SIZE_METRIC_ROW[1] * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, name in zip(axes, names):
        r = metric(f, name)
        ax.plot(r[:, 0], r[:, 1], color="tab:blue", alpha=0.35 if len(r) > 50 else 1.0, lw=0.8)
        if len(r) > 50:
            ax.plot(r[:, 0], smooth(r[:, 1]), color="tab:blue", lw=1.5)
        # A loss falling from 0.2 to 1e-5 is a flat line at 0 on a linear axis.
        values = r[:, 1][np.isfinite(r[:, 1])]
        if len(values) and np.min(values) > 0 and np.max(values) / np.min(values) > 100:
            log_y_if_positive(ax, [values])
            name += " (log scale)"
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    for ax in axes[len(names):]:
        ax.axis("off")
    fig.suptitle(f"{os.path.basename(f.filename)}: {text_attr(f, 'experiment', 'metrics')}")
    save(fig, out_dir, "metrics.png", written)


def map_panel_title(name, lead, k):
    """The title of panel k of a series' maps whose leading dimensions (those
    before [T, S]) are lead: [N, H] as KeepAttention gives a
    MultiHeadAttention's maps is "batch b, head h"."""
    import numpy as np
    if not lead or int(np.prod(lead)) == 1:
        return name
    index = [int(i) for i in np.unravel_index(k, lead)]
    if len(lead) == 2:
        return f"batch {index[0]}, head {index[1]}"
    return str(index[0]) if len(lead) == 1 else "[" + ", ".join(map(str, index)) + "]"


def plot_series_maps(f, out_dir, written):
    """Every series named like attention maps (a name with "attention" or
    ending in "maps", values [..., T, S] per row) that no figure drew yet
    (written.series), drawn at its last logged step, one panel per leading
    index: a user's own program's maps, also in a log whose experiment is
    called like a bundled one."""
    import h5py
    import numpy as np
    g = f.get("series")
    if not isinstance(g, h5py.Group):
        return
    names = []
    g.visit(lambda n: names.append(n[:-len("/values")]) if n.endswith("/values") and isinstance(g[n], h5py.Dataset)
            else None)
    for name in sorted(names):
        if ("attention" not in name and not name.endswith("maps")) or name in written.series:
            continue
        series_maps(f, name, out_dir, written)


@figure(lambda f, name, *_: f"the figure of series '{name}'")
def series_maps(f, name, out_dir, written):
    """plot_series_maps' figure of one series."""
    import numpy as np
    last = series_last(f, name)
    if last is not None:
        step, maps = last
        maps = np.asarray(maps, dtype=np.float64)
        if maps.ndim < 2 or min(maps.shape[-2:]) < 2:
            return
        lead = maps.shape[:-2]
        maps = maps.reshape(-1, maps.shape[-2], maps.shape[-1])
        panels = min(maps.shape[0], 16)
        finite = maps[:panels][np.isfinite(maps[:panels])]
        vmax = max(float(finite.max()) if finite.size else 1.0, 1e-12)
        fig, axes, im, _, _ = heatmap_grid(maps, panels, vmax, lambda k: map_panel_title(name, lead, k))
        for ax in axes[:panels]:
            ax.set_xlabel("key (column)")
            ax.set_ylabel("query (row)")
        fig.colorbar(im, ax=list(axes), shrink=0.9, label="attention weight")
        more = f" (the first 16 of {maps.shape[0]})" if maps.shape[0] > 16 else ""
        fig.suptitle(f"{name} at step {step}{more}")
        # A name of its own beside the experiment's figures (a series
        # attention/layer0 beside charlm's attention_layer0.png).
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        taken = {os.path.basename(p) for p in written}
        file, k = stem + ".png", 1
        while file in taken:
            k += 1
            file = f"{stem}_{k}.png"
        save(fig, out_dir, file, written)
        written.series.add(name)


# ---- main --------------------------------------------------------------------------

def refuse_bad_values(f, path, experiment):
    """Values no figure can be drawn from, refused before anything is
    written: a timeseries signal's period must be a positive number (the
    marks one period apart were drawn from the last position back to 0:
    for ever with a period <= 0)."""
    import numpy as np
    if experiment == "timeseries":
        period = fixed(f, "samples/period", "[S]")
        if period is not None:
            for i, p in enumerate(np.asarray(period, dtype=np.float64)):
                if not (math.isfinite(p) and p > 0):
                    die(f"plot: '{path}': samples/period[{i}] is {p:g}, expected a period > 0 "
                        f"(the number of steps per cycle of test signal {i})")


def default_out_dir(path):
    return (path[:-3] if path.endswith(".h5") and len(path) > 3 else path) + "_plots"


def plot(path, out_dir=None):
    """Writes the figures of the log at path; returns the files written."""
    import_modules()
    f = open_log(path)
    with f:
        if "heed_checkpoint_format" in f.attrs:
            die(f"plot: '{path}' is a checkpoint, not a run log (heed inspect shows what it holds)")
        if "heed_log_format" not in f.attrs:  # as heed inspect calls it
            die(f"plot: '{path}' is an HDF5 file that is not a heed log or checkpoint (it has no heed_log_format "
                f"attribute, docs/log-format.md); expected a run log")
        experiment = text_attr(f, "experiment", "")
        refuse_bad_values(f, path, experiment)
        out_dir = out_dir or default_out_dir(path)
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            die(f"plot: cannot create the directory '{out_dir}': {e.strerror}")
        written = Written()
        if experiment == "shapes":
            plot_shapes(f, out_dir, written)
        elif experiment == "charlm":
            plot_charlm(f, out_dir, written)
        elif experiment == "attend":
            plot_attend(f, out_dir, written)
        elif experiment == "scaling":
            plot_scaling(f, out_dir, written)
        elif experiment == "compression":
            plot_compression(f, out_dir, written)
        elif experiment in ("timeseries", "crossattn"):
            import heed_plot_signals
            heed_plot_signals.PLOTTERS[experiment](f, out_dir, written)
        else:  # a user's own program: its metrics
            plot_metrics(f, out_dir, written)
        # Attention maps by their names: every log's that no figure above drew.
        plot_series_maps(f, out_dir, written)
        if not written:
            print(f"plot: '{path}' holds nothing to draw yet", file=sys.stderr)
        return written


def main(argv):
    import argparse
    if argv == ["--check-modules"]:  # heed's check before a run whose end draws a figure
        import_modules()
        print(CHECKED)  # the answer heed waits for: a program that is no Python may exit 0 too
        return 0
    parser = argparse.ArgumentParser(prog="heed plot", description="Draws a heed run log as PNG figures.")
    parser.add_argument("file", help="the run log (HDF5)")
    parser.add_argument("-o", "--out", help="output directory (default: FILE without .h5, plus _plots)")
    args = parser.parse_args(argv)
    plot(args.file, args.out)
    return 0


def end_with_parent():
    """Run by `heed plot` (HEED_PLOT_PARENT is its pid): end when heed ends,
    however it ends (a Ctrl-C sent to heed alone), not draw on after it."""
    parent = os.environ.get("HEED_PLOT_PARENT")
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:  # heed ended before the line above
        sys.exit(1)


if __name__ == "__main__":
    remove_temporary_on_signals()
    end_with_parent()
    sys.exit(main(sys.argv[1:]))
