"""The chargeback as one self-contained HTML page: inline SVG charts and tables, no scripts,
no fonts or images to fetch, so it opens offline and survives being mailed around."""

from __future__ import annotations

from collections import defaultdict
from html import escape

from lake_reports.charges import CATEGORIES, NO_GROWTH, ChargebackResult, TableCharge
from lakeio.store import uris
from lakeio.text import human_bytes, shorten, usd

COLOURS = {
    "live": "#2b6cb0", "time_travel": "#63b3ed", "pinned": "#38a169", "reclaimable": "#e53e3e", "log": "#805ad5",
    "other": "#a0aec0", "noncurrent": "#dd6b20", "delete_marker": "#744210", "untracked": "#718096",
    "unclassified": "#2d3748",
}
SERIES = ("#2b6cb0", "#e53e3e", "#38a169", "#dd6b20", "#805ad5", "#718096")
TOP_TABLES = 15
TREND_TABLES = 5
AXIS_TICKS = 4  # the trend's y axis: gridlines at 0, 1/4, ... of the largest size
AXIS_DATES = 6  # the trend's x axis: at most this many dates labelled


def render(result: ChargebackResult) -> str:
    tables = result.tables()
    prefix = uris.common_folder([t.table for t in tables if t.table])
    total = sum(t.bytes for t in tables)
    dollars = sum(t.usd_per_month for t in tables)
    warnings = [f"{escape(root)}: {escape(reason)}" for root, reason in result.unreadable.items()]
    if result.unpriced:
        warnings.append("no price for storage class(es) " + escape(", ".join(result.unpriced)))
    if not result.balanced:
        warnings.append("the split does not add up to the inventory's totals")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Storage chargeback {escape(result.inventory_date)}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #1a202c; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ padding: 3px 6px; border-bottom: 1px solid #e2e8f0; text-align: right; white-space: nowrap; }}
th {{ white-space: normal; vertical-align: bottom; }}
th:first-child, td:first-child {{ text-align: left; white-space: normal; overflow-wrap: anywhere; min-width: 12em; }}
.wide {{ max-width: 100%; overflow-x: auto; }}
.wide table {{ font-size: 13px; }}
.warn {{ color: #c53030; }}
.legend span {{ display: inline-block; margin-right: 1em; }}
.legend i {{ display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: middle; }}
</style></head><body>
<h1>Storage chargeback</h1>
<p>Inventory <code>{escape(result.inventory_table)}</code> as of <b>{escape(result.inventory_date)}</b>;
generated {escape(result.generated_at)}. {len(tables)} table(s) and untracked areas,
<b>{human_bytes(total)}</b>, <b>{_usd(dollars)}</b> per month.{
    f" Tables are named relative to <code>{escape(prefix)}</code>." if prefix else ""}</p>
{"".join(f'<p class="warn">{w}</p>' for w in warnings)}
<h2>Top tables by bytes</h2>
{_legend(tables[:TOP_TABLES])}
{_top_tables_chart(tables[:TOP_TABLES], prefix)}
<h2>By storage class</h2>
{_storage_class_chart(result)}
<h2>Trend</h2>
{_trend_chart(result, tables, prefix)}
<h2>All tables</h2>
{_tables_table(tables, prefix)}
</body></html>
"""


def _name(charge: TableCharge, prefix: str = "") -> str:
    return charge.table.removeprefix(prefix) if charge.table else f"(untracked in {charge.bucket})"


def _legend(tables: list[TableCharge]) -> str:
    """The categories the chart shows: those with bytes in one of its tables."""
    shown = [c for c in CATEGORIES if any(t.bytes_by_category.get(c, 0) for t in tables)]
    items = "".join(f'<span><i style="background:{COLOURS[c]}"></i>{c.replace("_", " ")}</span>' for c in shown)
    return f'<p class="legend">{items}</p>'


def _top_tables_chart(tables: list[TableCharge], prefix: str) -> str:
    """Horizontal bars, one per table, stacked by category."""
    label_width, bar_width, row = 360, 560, 24
    largest = max((t.bytes for t in tables), default=0) or 1
    parts = []
    for i, charge in enumerate(tables):
        y = i * row
        parts.append(f'<text x="{label_width - 8}" y="{y + 16}" text-anchor="end" font-size="12">'
                     f'{escape(shorten(_name(charge, prefix), 48))}</text>')
        x = float(label_width)
        for category in CATEGORIES:
            width = charge.bytes_by_category.get(category, 0) / largest * bar_width
            if width > 0:
                parts.append(f'<rect x="{x:.1f}" y="{y + 4}" width="{width:.1f}" height="{row - 8}" '
                             f'fill="{COLOURS[category]}"><title>{escape(_name(charge))}: {category} '
                             f'{human_bytes(charge.bytes_by_category[category])}</title></rect>')
                x += width
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 16}" font-size="12">{human_bytes(charge.bytes)}, '
                     f'{_usd(charge.usd_per_month)}/month</text>')
    height = max(len(tables), 1) * row
    return _svg("top-tables", label_width + bar_width + 190, height, parts)


def _storage_class_chart(result: ChargebackResult) -> str:
    """Bytes per storage class, with the monthly cost beside each bar."""
    by_class: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for cell in result.cells:
        by_class[cell.storage_class][0] += cell.bytes
        by_class[cell.storage_class][1] += cell.usd_per_month or 0.0
    ordered = sorted(by_class.items(), key=lambda kv: -kv[1][0])
    label_width, bar_width, row = 200, 500, 24
    largest = max((b for b, _ in by_class.values()), default=0) or 1
    parts = []
    for i, (storage_class, (size, dollars)) in enumerate(ordered):
        y = i * row
        width = size / largest * bar_width
        parts += [
            f'<text x="{label_width - 8}" y="{y + 16}" text-anchor="end" font-size="12">{escape(storage_class)}</text>',
            f'<rect x="{label_width}" y="{y + 4}" width="{width:.1f}" height="{row - 8}" fill="{SERIES[0]}">'
            f'<title>{escape(storage_class)}: {human_bytes(int(size))}</title></rect>',
            f'<text x="{label_width + width + 6:.1f}" y="{y + 16}" font-size="12">'
            f'{human_bytes(int(size))}, {_usd(dollars)}/month</text>',
        ]
    return _svg("storage-classes", label_width + bar_width + 200, max(len(ordered), 1) * row, parts)


def _trend_chart(result: ChargebackResult, tables: list[TableCharge], prefix: str) -> str:
    """Bytes per inventory date of the largest tables, one line each."""
    dates = sorted({p.inventory_date for p in result.trend})
    if len(dates) < 2:
        return "<p>One inventory date so far: the trend starts with the next one.</p>"
    chosen = [(t.bucket, t.table) for t in tables[:TREND_TABLES]]
    series: dict[tuple[str, str | None], dict[str, int]] = {key: {} for key in chosen}
    for point in result.trend:
        if (point.bucket, point.table) in series:
            series[(point.bucket, point.table)][point.inventory_date] = point.bytes
    width, height, left, bottom = 760, 260, 80, 30
    largest = max((b for s in series.values() for b in s.values()), default=0) or 1

    def xy(i: int, size: int) -> str:
        x = left + i / (len(dates) - 1) * (width - left - 20)
        y = height - bottom - size / largest * (height - bottom - 10)
        return f"{x:.1f},{y:.1f}"

    parts = []
    for tick in range(AXIS_TICKS + 1):  # the y axis: a gridline and its size at each fifth
        size = largest * tick // AXIS_TICKS
        y = xy(0, size).split(",")[1]
        parts += [f'<line x1="{left}" y1="{y}" x2="{width - 20}" y2="{y}" stroke="{"#a0aec0" if not tick else "#edf2f7"}"/>',
                  f'<text x="{left - 6}" y="{float(y) + 4:.1f}" text-anchor="end" font-size="11">{human_bytes(size)}</text>']
    shown = sorted({round(i * (len(dates) - 1) / (AXIS_DATES - 1)) for i in range(AXIS_DATES)})
    for i in shown:  # the x axis: the first and last dates, and evenly spaced ones between
        x = xy(i, 0).split(",")[0]
        anchor = "start" if i == 0 else "end" if i == len(dates) - 1 else "middle"
        parts.append(f'<text x="{x}" y="{height - 10}" text-anchor="{anchor}" font-size="11">{escape(dates[i])}</text>')
    legend = []
    for colour, (key, points) in zip(SERIES, series.items()):
        line = " ".join(xy(i, points.get(d, 0)) for i, d in enumerate(dates))
        name = key[1].removeprefix(prefix) if key[1] else f"(untracked in {key[0]})"
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2">'
                     f'<title>{escape(name)}</title></polyline>')
        legend.append(f'<span><i style="background:{colour}"></i>{escape(shorten(name, 60))}</span>')
    return f'<p class="legend">{"".join(legend)}</p>' + _svg("trend", width, height, parts)


def _tables_table(tables: list[TableCharge], prefix: str) -> str:
    head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in CATEGORIES)
    rows = []
    for t in tables:
        cells = "".join(f"<td>{human_bytes(t.bytes_by_category.get(c, 0))}</td>" for c in CATEGORIES)
        growth = "" if t.growth_bytes_per_day is None else human_bytes(int(t.growth_bytes_per_day)) + "/day"
        rows.append(f"<tr><td>{escape(_name(t, prefix))}</td><td>{t.objects:,}</td><td>{human_bytes(t.bytes)}</td>{cells}"
                    f"<td>{_usd(t.usd_per_month)}</td><td>{growth}</td></tr>")
    why = "" if any(t.growth_bytes_per_day is not None for t in tables) else f"<p>{escape(NO_GROWTH)}</p>"
    return (f'<div class="wide"><table><tr><th>table</th><th>objects</th><th>total</th>{head}<th>$/month</th>'
            f'<th>growth</th></tr>' + "".join(rows) + "</table></div>" + why)


def _usd(amount: float) -> str:
    return escape(usd(amount))


def _svg(chart_id: str, width: int, height: int, parts: list[str]) -> str:
    """A chart drawn ``width`` wide, shrunk with its labels to a narrower window (never scrolled sideways)."""
    return (f'<svg id="{chart_id}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" style="max-width: 100%; height: auto" role="img">'
            + "".join(parts) + "</svg>")
