"""heed_plot_signals.py: the figures of the timeseries and crossattn logs.

heed_plot.py calls plot_timeseries or plot_crossattn for a log whose
`experiment` attribute names them; the helpers (reading a SWMR log, figure
sizes, saving) are heed_plot's.

  timeseries  losses.png (training loss per step, test MSE per evaluation with
              the reference forecasts), same_phase.png (attention at the same
              phase of earlier cycles against attention spread evenly),
              forecast_<i>.png (a test signal, its clean pattern and each
              model's forecast), attention_signal_<i>.png (the signal with the
              attention of its last query drawn on it, the earlier cycles'
              same phase marked) and attention_maps.png (every head's map for
              test signal 0)
  crossattn   losses.png, shape_tokens.png (attention of a shape's positions
              on its own tokens against attention spread evenly) and
              sample_<i>.png (the described signal, the model's drawing and
              each head's cross-attention from positions to tokens)
"""

import math
import os

import re

from heed_plot import (FIG_DPI, figure, fixed, int_attr, log_y_if_positive, metric, model_colour, new_figure,
                       not_logged, save, series_last, smooth, SMOOTH_FROM, text_attr)

N_SAMPLES = 4
SIZE_LOSSES = (12, 4.5)      # 1200 x 450
SIZE_SCORE = (6, 4)          # 600 x 400
SIZE_FORECAST = (10, 4.5)    # 1000 x 450
ATTN_SIGNAL_TOP = 3.2        # attention_signal: 1000 x (100 x (3.2 + 1.8 per layer))
ATTN_SIGNAL_LAYER = 1.8
MAP_SIZE = (4, 4.5)          # attention_maps: 400 x 450 per head, one row per layer
SAMPLE_TOP = 3.2             # crossattn sample: 1000 x (100 x (3.2 + 2.2 per layer and head)), 1200 by default
SAMPLE_HEAD = 2.2
SHAPE_COLOURS = ["tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive"]

assert FIG_DPI == 100


def reference(f, name):
    v = fixed(f, "reference/" + name, "[]")
    return None if v is None else float(v)


@figure("losses.png")
def draw_losses(f, models, references, title, out_dir, written):
    """Training loss per step (raw and smoothed) and test MSE per evaluation,
    one colour per model, references ((label, dataset under reference/)) as
    horizontal lines."""
    references = [(label, reference(f, name)) for label, name in references]
    fig = new_figure(SIZE_LOSSES)
    ax_step, ax_test = fig.subplots(1, 2)
    steps, tests = [], []
    for i, (m, prefix) in enumerate(models):
        colour = model_colour(m, i)
        tl = metric(f, prefix + "train_loss")
        if tl is not None:
            ax_step.plot(tl[:, 0], tl[:, 1], color=colour, alpha=0.25, lw=0.8)
            ax_step.plot(tl[:, 0], smooth(tl[:, 1]), color=colour, lw=1.8, label=m)
            steps.append(tl[:, 1])
        te = metric(f, prefix + "test_mse")
        if te is not None:
            ax_test.plot(te[:, 0], te[:, 1], "-o", ms=4, color=colour, label=m)
            tests.append(te[:, 1])
    for ax, data, what in ((ax_step, steps, "training loss (MSE) per step"), (ax_test, tests, "test MSE")):
        if not data:
            not_logged(ax, what)
            continue
        if ax is ax_test:
            for j, (label, value) in enumerate(references):
                if value is not None:
                    ax.axhline(value, color="0.35", lw=1.0, ls=["--", ":", "-."][j % 3], label=label)
                    data.append([value])
        log = log_y_if_positive(ax, data)
        ax.set_xlabel("step")
        ax.set_ylabel("MSE" + (" (log scale)" if log else ""))
        smoothed = ax is ax_step and any(len(d) >= SMOOTH_FROM for d in data)
        ax.set_title(what + (" (light: raw, dark: smoothed)" if smoothed else ""))
        ax.legend(fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"{os.path.basename(f.filename)}: {title}")
    save(fig, out_dir, "losses.png", written)


@figure(lambda f, curves, uniform, ylabel, title, name, *_: name)
def draw_score(f, curves, uniform, ylabel, title, name, out_dir, written):
    """Scores over steps (curves: (metric, label, line style, colour)) with the uniform baseline."""
    rows = [(metric(f, m), label, style, colour) for m, label, style, colour in curves]
    rows = [r for r in rows if r[0] is not None]
    if not rows:
        return
    fig = new_figure(SIZE_SCORE)
    ax = fig.subplots()
    for r, label, style, colour in rows:
        ax.plot(r[:, 0], r[:, 1], style, ms=4, color=colour, label=label)
    u = metric(f, uniform)
    if u is not None:
        ax.plot(u[:, 0], u[:, 1], "--", color="0.4", label="attention spread evenly")
    ax.set_ylim(0, 1)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    save(fig, out_dir, name, written)


# ---- timeseries -------------------------------------------------------------------

def ts_models(f):
    return [m for m in ("attention", "cnn") if metric(f, m + "/train_loss") is not None]


def ts_anomalies(f, i, dims):
    pos, width, height = (fixed(f, "samples/anomaly_" + k, "[S, A]", dims) for k in ("position", "width", "height"))
    if pos is None or width is None or height is None or len(pos) <= i:
        return []
    return [(int(p), int(w), float(h)) for p, w, h in zip(pos[i], width[i], height[i]) if p >= 0]


def ts_signal(ax, f, i, length, dims):
    """The input (grey), its clean pattern (dashed) and the anomalies (shaded); returns the input."""
    import numpy as np
    x, clean = fixed(f, "samples/input", "[S, T]", dims), fixed(f, "samples/clean", "[S, T]", dims)
    t = np.arange(length)
    ax.plot(t, x[i], color="0.55", lw=1.0, label="input: pattern + noise + anomalies")
    if clean is not None:
        ax.plot(t, clean[i], color="k", lw=1.2, ls="--", label="clean pattern")
    for j, (p, w, _) in enumerate(ts_anomalies(f, i, dims)):
        ax.axvspan(p - 0.5, p + w - 0.5, color="tab:orange", alpha=0.25, lw=0, label="anomaly" if j == 0 else None)
    ax.set_xlim(-0.5, length - 0.5)
    return x[i]


@figure("forecast_<i>.png")
def ts_forecast(f, i, models, out_dir, written):
    import numpy as np
    dims = {}
    x = fixed(f, "samples/input", "[S, T]", dims)
    if x is None or len(x) <= i:
        return
    length = x.shape[-1]
    fig = new_figure(SIZE_FORECAST)
    ax = fig.subplots()
    ts_signal(ax, f, i, length, dims)
    steps = []
    for j, m in enumerate(models):
        last = series_last(f, f"{m}/output", "[S, T]", dims)
        if last is None or len(last[1]) <= i:
            continue
        steps.append(last[0])
        # Position t forecasts t + 1: drawn where it lands.
        ax.plot(np.arange(1, length + 1), last[1][i], color=model_colour(m, j), lw=1.5, label=f"{m} forecast")
        written.series.add(f"{m}/output")
    first = int_attr(f, "first_scored_position", low=0)
    if first is not None:
        ax.axvline(first + 0.5, color="0.3", lw=0.8, ls=":", label="scored from here")
    period = fixed(f, "samples/period", "[S]", dims)
    ax.set_xlabel("position")
    ax.set_title(f"test signal {i}" + (f" (period {float(period[i]):.2f})" if period is not None else "") +
                 (f": forecasts of the next clean value at step {max(steps)}" if steps else ": no forecasts logged"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9)
    ax.grid(True, alpha=0.3)
    save(fig, out_dir, f"forecast_{i}.png", written)


@figure("attention_signal_<i>.png")
def ts_attention_signal(f, i, out_dir, written):
    """The signal with the attention of its last query drawn on it."""
    import numpy as np
    dims = {}
    last = series_last(f, "attention/maps", "[S, Y, H, T, T]", dims)
    x = fixed(f, "samples/input", "[S, T]", dims)
    if last is None or last[1].ndim != 5 or x is None or len(last[1]) <= i:  # [signals, layers, H, T, T]
        return
    step, maps = last
    maps = np.asarray(maps[i], dtype=np.float64)  # [layers, H, T, T]
    layers, heads, length = maps.shape[0], maps.shape[1], maps.shape[-1]
    q = length - 1  # the last query, which forecasts position T
    period = fixed(f, "samples/period", "[S]", dims)
    fig = new_figure((10, ATTN_SIGNAL_TOP + ATTN_SIGNAL_LAYER * layers))
    axes = fig.subplots(1 + layers, 1, sharex=True, height_ratios=[ATTN_SIGNAL_TOP] + [ATTN_SIGNAL_LAYER] * layers)
    ax = axes[0]
    signal = ts_signal(ax, f, i, length, dims)
    t = np.arange(length)
    # Each key drawn on the signal with an area proportional to its weight
    # (mean over the heads of the last layer).
    w = maps[-1, :, q, :].mean(axis=0)
    ax.scatter(t, signal, s=900 * w, color="tab:red", alpha=0.55, lw=0, zorder=4,
               label=f"attention of query {q} (layer {layers - 1}, mean of heads)")
    ax.axvline(q, color="tab:red", lw=1.2, label=f"query {q}, forecasting {q + 1}")
    marks = []
    if period is not None:
        p = float(period[i])  # > 0: heed_plot.refuse_bad_values
        k = 1
        while q + 1 - k * p >= -0.5 and k <= length:
            marks.append(q + 1 - k * p)
            k += 1
    for axis in axes:
        for j, m in enumerate(marks):
            axis.axvline(m, color="tab:blue", lw=0.9, ls=":",
                         label=("same phase, 1, 2, ... periods back" if j == 0 and axis is ax else None))
    ax.set_title(f"test signal {i}: where its last position looks (attention at step {step})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.grid(True, alpha=0.3)
    width = 0.8 / heads
    for layer in range(layers):
        axl = axes[1 + layer]
        for h in range(heads):
            axl.bar(t - 0.4 + width * (h + 0.5), maps[layer, h, q, :], width=width, color=f"C{h}",
                    label=f"head {h}")
        axl.set_ylabel(f"layer {layer}\nweight")
        axl.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        axl.grid(True, alpha=0.3)
    axes[-1].set_xlabel("key position")
    save(fig, out_dir, f"attention_signal_{i}.png", written)
    written.series.add("attention/maps")


@figure("attention_maps.png")
def ts_attention_maps(f, out_dir, written):
    import numpy as np
    dims = {}
    last = series_last(f, "attention/maps", "[S, Y, H, T, T]", dims)
    if last is None or last[1].ndim != 5 or len(last[1]) == 0:  # [signals, layers, H, T, T]
        return
    step, maps = last
    maps = np.asarray(maps[0], dtype=np.float64)  # [layers, H, T, T]
    layers, heads = maps.shape[0], maps.shape[1]
    fig = new_figure((MAP_SIZE[0] * heads, MAP_SIZE[1] * layers))
    axes = np.atleast_2d(fig.subplots(layers, heads, squeeze=False))
    # The first rows (no earlier cycle yet, row 0 always 1) would wash out the rest.
    first = int_attr(f, "first_scored_position", 1, low=0)
    vmax = max(float(maps[:, :, min(first, maps.shape[2] - 1):].max()), 1e-12)
    im = None
    for layer in range(layers):
        for h in range(heads):
            ax = axes[layer, h]
            im = ax.imshow(maps[layer, h], origin="upper", cmap="viridis", vmin=0, vmax=vmax, interpolation="nearest")
            ax.set_title(f"layer {layer}, head {h}")
            ax.set_xlabel("key (column)")
            ax.set_ylabel("query (row)")
    fig.colorbar(im, ax=list(axes.ravel()), shrink=0.9, extend="max" if vmax < 1 else "neither",
                 label="attention weight (rows sum to 1)")
    period = fixed(f, "samples/period", "[S]", dims)
    fig.suptitle(f"test signal 0" + (f" (period {float(period[0]):.2f})" if period is not None else "") +
                 f": attention at step {step}")
    save(fig, out_dir, "attention_maps.png", written)
    written.series.add("attention/maps")


def attention_layers(f):
    """The l of each group metrics/attention/layer<l>, in order."""
    import h5py
    g = f.get("metrics/attention")
    if not isinstance(g, h5py.Group):
        return []
    return sorted(int(m.group(1)) for m in (re.fullmatch(r"layer(\d+)", k) for k in g.keys()) if m)


def plot_timeseries(f, out_dir, written):
    models = ts_models(f)
    draw_losses(f, [(m, m + "/") for m in models],
                [("last value", "persistence_mse"), ("one period back", "seasonal_mse")],
                "forecasting periodic signals, " + (", ".join(models) or "no models"), out_dir, written)
    layers = attention_layers(f)
    curves = []
    for layer in layers:
        curves.append((f"attention/layer{layer}/same_phase_best_head", f"layer {layer}: best head", "-o",
                       f"C{layer}"))
        curves.append((f"attention/layer{layer}/same_phase", f"layer {layer}: mean of heads", "--s", f"C{layer}"))
    draw_score(f, curves, "attention/uniform", "attention mass at the same phase",
               "attention within the window of the same phase of earlier cycles", "same_phase.png", out_dir, written)
    x = fixed(f, "samples/input", "[S, T]")
    n = min(N_SAMPLES, len(x)) if x is not None else 0
    for i in range(n):
        ts_forecast(f, i, models, out_dir, written)
    for i in range(n):
        ts_attention_signal(f, i, out_dir, written)
    ts_attention_maps(f, out_dir, written)


# ---- crossattn ---------------------------------------------------------------------

def ca_shapes(f, i, vocabulary, dims):
    """(centre, label) of each shape of sample i, in token order."""
    tokens, centres = fixed(f, "samples/tokens", "[S, N]", dims), fixed(f, "samples/centres", "[S, M]", dims)
    if tokens is None or centres is None or len(tokens) <= i:
        return []
    names = lambda ids: " ".join(vocabulary[int(t)] if 0 <= int(t) < len(vocabulary) else str(int(t)) for t in ids)
    return [(int(centres[i][m]), names(tokens[i][3 * m:3 * m + 3])) for m in range(len(centres[i]))]


@figure("sample_<i>.png")
def ca_sample(f, i, vocabulary, out_dir, written):
    import numpy as np
    dims = {}
    signal = fixed(f, "samples/signal", "[S, T]", dims)
    if signal is None or len(signal) <= i:
        return
    length = signal.shape[-1]
    half = int_attr(f, "half_width", 4, low=0)
    last_maps = series_last(f, "attention/maps", "[S, Y, H, T, N]", dims)  # [samples, layers, H, T, tokens]
    maps = (np.asarray(last_maps[1][i], dtype=np.float64)
            if last_maps and last_maps[1].ndim == 5 and len(last_maps[1]) > i else None)
    layers, heads = (maps.shape[0], maps.shape[1]) if maps is not None else (0, 0)
    tokens = fixed(f, "samples/tokens", "[S, N]", dims)
    s = tokens.shape[-1] if tokens is not None else maps.shape[-1] if maps is not None else 0
    fig = new_figure((10, SAMPLE_TOP + SAMPLE_HEAD * layers * heads))
    axes = np.atleast_1d(fig.subplots(1 + layers * heads, 1, sharex=True,
                                      height_ratios=[SAMPLE_TOP] + [SAMPLE_HEAD] * (layers * heads)))
    ax = axes[0]
    t = np.arange(length)
    ax.plot(t, signal[i], color="k", lw=1.4, ls="--", label="described signal")
    out = series_last(f, "output", "[S, T]", dims)
    if out is not None and len(out[1]) > i:
        ax.plot(t, out[1][i], color="tab:red", lw=1.6, label=f"drawn at step {out[0]}")
    top = float(np.max(signal[i])) if signal[i].size else 1.0
    for m, (c, label) in enumerate(ca_shapes(f, i, vocabulary, dims)):
        colour = SHAPE_COLOURS[m % len(SHAPE_COLOURS)]
        ax.axvspan(c - half - 0.5, c + half + 0.5, color=colour, alpha=0.18, lw=0)
        ax.text(c, top * 1.12 + 0.1, f"{m}: {label}", ha="center", va="bottom", fontsize=8, color=colour)
    ax.set_ylim(min(0.0, float(np.min(signal[i]))) - 0.2, top * 1.4 + 0.4)
    ax.set_xlim(-0.5, length - 0.5)
    ax.set_title(f"test sample {i}: the signal its tokens describe (shapes in token order)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.grid(True, alpha=0.3)
    labels = []
    if tokens is not None:
        labels = [vocabulary[int(v)] if 0 <= int(v) < len(vocabulary) else str(int(v)) for v in tokens[i]]
    k = 0
    for layer in range(layers):
        for h in range(heads):
            k += 1
            axm = axes[k]
            # Rows are tokens, columns signal positions: the transpose of the map.
            axm.imshow(maps[layer, h].T, origin="upper", aspect="auto", cmap="viridis", vmin=0, vmax=1,
                       interpolation="nearest", extent=(-0.5, length - 0.5, s - 0.5, -0.5))
            axm.set_yticks(range(s), labels, fontsize=7, fontfamily="monospace")
            for j, tick in enumerate(axm.get_yticklabels()):
                tick.set_color(SHAPE_COLOURS[(j // 3) % len(SHAPE_COLOURS)])
            axm.set_ylabel(f"layer {layer}\nhead {h}")
    axes[-1].set_xlabel("signal position (query); colour: attention weight on each token, 0 (dark) to 1 (yellow)")
    save(fig, out_dir, f"sample_{i}.png", written)
    if out is not None and len(out[1]) > i:
        written.series.add("output")
    if maps is not None:
        written.series.add("attention/maps")


def plot_crossattn(f, out_dir, written):
    draw_losses(f, [("crossattn", "")], [("drawing nothing", "zero_mse")],
                "signals drawn from token descriptions", out_dir, written)
    layers = attention_layers(f)
    curves = []
    for layer in layers:
        curves.append((f"attention/layer{layer}/shape_tokens", f"layer {layer}: on the shape's 3 tokens", "-o",
                       f"C{layer}"))
        curves += [(f"attention/layer{layer}/on_{field}", f"layer {layer}: its {field} token", style, f"C{layer}")
                   for field, style in (("kind", "--"), ("position", ":"), ("height", "-."))]
    draw_score(f, curves, "attention/uniform", "attention mass",
               "attention of a shape's positions on the tokens describing it", "shape_tokens.png", out_dir, written)
    vocabulary = (text_attr(f, "vocabulary", "") or "").split()
    signal = fixed(f, "samples/signal", "[S, T]")
    n = min(N_SAMPLES, len(signal)) if signal is not None else 0
    for i in range(n):
        ca_sample(f, i, vocabulary, out_dir, written)


PLOTTERS = {"timeseries": plot_timeseries, "crossattn": plot_crossattn}
