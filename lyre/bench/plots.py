"""PNG charts of a bench run: TTFA percentiles and the viable share against load, with the SLO lines, and the
audible TTFA with C100 as the field's rate sweeps show them.

Drawn on matplotlib's Agg canvas directly (no pyplot), so no display, global
figure state or backend switch is involved; matplotlib is imported only here,
when plots are asked for.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lyre.bench.runner import BenchResult, LevelResult

__all__ = ["write_plots"]

_SIZE_IN = (7.0, 4.5)
_DPI = 120
_PERCENTILES = (("ttfa_p50_s", "p50", "-"), ("ttfa_p90_s", "p90", "--"), ("ttfa_p99_s", "p99", ":"))
_LOG_SPAN = 4  # highest over lowest load from which the load axis is logarithmic
_SLO_STYLE = {"color": "tab:red", "linewidth": 1.0, "linestyle": "-.", "alpha": 0.8}


def _figure() -> Figure:
    figure = Figure(figsize=_SIZE_IN, dpi=_DPI)
    FigureCanvasAgg(figure)
    return figure


def _load_axis(ax: Axes, result: BenchResult) -> None:
    """Label the x axis with the sweep's own levels; doubling sweeps (1 2 4 8) read best on a log scale."""
    levels = sorted(result.config.levels)
    if levels[-1] / levels[0] >= _LOG_SPAN:
        ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [f"{level:g}" for level in levels])
    ax.minorticks_off()
    ax.set_xlabel("concurrent streams" if result.config.mode == "concurrency" else "arrival rate (requests/s)")


def _points(levels: list[LevelResult], attribute: str, scale: float = 1.0) -> tuple[list[float], list[float]]:
    """The (load, value) pairs where the value exists: an absent figure leaves a gap, not a zero."""
    xs, ys = [], []
    for level in levels:
        value = getattr(level.summary, attribute)
        if value is not None:
            xs.append(level.summary.load)
            ys.append(value * scale)
    return xs, ys


def _name(result: BenchResult, i: int) -> str:
    """The table's name for the server and its URL when servers are compared; nothing for one server."""
    return f"{result.config.name(i)}: {result.targets[i].url}" if len(result.targets) > 1 else ""


def _ttfa(result: BenchResult, path: Path) -> None:
    figure = _figure()
    ax = figure.subplots()
    for i, target in enumerate(result.targets):
        color = f"C{i}"
        for attribute, label, style in _PERCENTILES:
            xs, ys = _points(target.levels, attribute, scale=1000)
            name = _name(result, i)
            ax.plot(xs, ys, style, marker="o", color=color, label=f"{name} {label}".strip())
    ax.axhline(result.config.slo.ttfa_p90_ms, **_SLO_STYLE, label=f"SLO p90 {result.config.slo.ttfa_p90_ms:g} ms")
    _load_axis(ax, result)
    ax.set_ylabel("time to first audio (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title("Time to first audio vs load")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, format="png")


def _viable(result: BenchResult, path: Path) -> None:
    figure = _figure()
    ax = figure.subplots()
    for i, target in enumerate(result.targets):
        xs, ys = _points(target.levels, "viable_share")
        ax.plot(xs, ys, "-", marker="o", color=f"C{i}", label=_name(result, i) or "viable share")
    slo = result.config.slo.viable_share
    ax.axhline(slo, **_SLO_STYLE, label=f"SLO {100 * slo:g}% viable")
    _load_axis(ax, result)
    ax.set_ylabel("share of viable streams")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Streams played without a gap vs load")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, format="png")


def _audible(result: BenchResult, path: Path) -> None:
    """As the field plots a rate sweep: audible TTFA p50 and p95 (left axis), C100 (right axis)."""
    figure = _figure()
    ax = figure.subplots()
    share = ax.twinx()
    for i, target in enumerate(result.targets):
        name = _name(result, i)
        for attribute, label, style in (("ttfa_audible_p50_s", "audible TTFA p50", "-"),
                                        ("ttfa_audible_p95_s", "audible TTFA p95", "--")):
            xs, ys = _points(target.levels, attribute, scale=1000)
            ax.plot(xs, ys, style, marker="o", color=f"C{i}", label=f"{name} {label}".strip())
        xs, ys = _points(target.levels, "c100")
        share.plot(xs, ys, ":", marker="s", color=f"C{i}", label=f"{name} C100".strip())
    _load_axis(ax, result)
    ax.set_ylabel("audible time to first audio (ms)")
    ax.set_ylim(bottom=0)
    share.set_ylabel("C100: share with no gap over 100 ms")
    share.set_ylim(-0.02, 1.02)
    ax.set_title("Audible first audio and playback gaps vs load")
    ax.grid(alpha=0.3)
    lines, labels = ax.get_legend_handles_labels()
    more, more_labels = share.get_legend_handles_labels()
    ax.legend(lines + more, labels + more_labels, fontsize="small")
    figure.tight_layout()
    figure.savefig(path, format="png")


def write_plots(result: BenchResult, directory: Path) -> list[Path]:
    """Write ``ttfa.png``, ``viable.png`` and ``audible.png`` into ``directory`` (made if missing); their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "ttfa.png", directory / "viable.png", directory / "audible.png"]
    _ttfa(result, paths[0])
    _viable(result, paths[1])
    _audible(result, paths[2])
    return paths
