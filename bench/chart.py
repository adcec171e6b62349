"""The bar chart beside docs/benchmarks.md: records/s of every path in every cell, raw baselines included."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.report import Suite

# Bar order and colours: the raw baselines in greys, then the mirror paths.
SERIES = (
    ("raw consume (confluent-kafka)", "#4d4d4d"),
    ("raw consume (kcat)", "#8c8c8c"),
    ("raw copy (consume → produce)", "#bfbfbf"),
    ("filesystem", "#1f77b4"),
    ("s3", "#ff7f0e"),
    ("kafka-preserve", "#2ca02c"),
    ("kafka-renumber", "#d62728"),
)
LABELS = {
    "filesystem": "mirror → filesystem",
    "s3": "mirror → S3 (moto)",
    "kafka-preserve": "mirror → Kafka (preserve)",
    "kafka-renumber": "mirror → Kafka (renumber)",
}


def series_values(suite: Suite) -> dict[str, list[float | None]]:
    """records/s per series, one value per cell (None where the series was not measured)."""
    values: dict[str, list[float | None]] = {name: [] for name, _ in SERIES}
    for run in suite.cells:
        values["raw consume (confluent-kafka)"].append(run.raw_rate)
        values["raw consume (kcat)"].append(run.kcat.records / run.kcat.seconds if run.kcat else None)
        values["raw copy (consume → produce)"].append(
            run.raw_copy.records / run.raw_copy.seconds if run.raw_copy else None
        )
        for kind in LABELS:
            values[kind].append(run.rate(kind))
    return values


def write_chart(suite: Suite, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: render straight to the file
    import matplotlib.pyplot as plt

    values = series_values(suite)
    present = [(name, colour) for name, colour in SERIES if any(v is not None for v in values[name])]
    cells = [run.cell.label.replace(", ", "\n") for run in suite.cells]
    width = 0.8 / max(1, len(present))
    figure, axes = plt.subplots(figsize=(max(8.0, 2.6 * len(cells)), 5.0), dpi=110)
    for index, (name, colour) in enumerate(present):
        xs, heights = [], []
        for cell, value in enumerate(values[name]):
            if value is not None:
                xs.append(cell - 0.4 + width * (index + 0.5))
                heights.append(value)
        bars = axes.bar(xs, heights, width=width, color=colour, label=LABELS.get(name, name))
        for bar, cell_index in zip(bars, [i for i, v in enumerate(values[name]) if v is not None], strict=True):
            raw = suite.cells[cell_index].raw_rate
            if name in LABELS:
                axes.annotate(
                    f"{bar.get_height() / raw:.2f}×",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    axes.set_yscale("log")
    axes.set_ylabel("records/s (log scale); labels: ratio to raw consume")
    axes.set_xticks(range(len(cells)), cells)
    axes.set_title("mirror-v3 backlog throughput vs raw Kafka clients, same run, same machine")
    axes.grid(axis="y", which="both", alpha=0.3)
    axes.legend(fontsize=8, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
