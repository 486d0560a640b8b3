"""The attempt timeline's geometry: attempts as bars on a time axis, drawn as inline SVG.

Pure arithmetic on a :class:`~airflow_crashsafe.ui.models.Timeline`; the template only places
what this computes. Overlaps (two executions alive at once) and scheduler outages are shaded
bands across all rows, so both are visible at a glance. A bar with no recorded end stops at the
execution's last sign of life and is drawn open-ended (dashed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from airflow_crashsafe.ui.models import Timeline

__all__ = ["Band", "Bar", "Chart", "Tick", "chart"]

WIDTH, LABEL, ROW, TOP, AXIS = 960, 230, 34, 26, 30
_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    label: str
    detail: str
    state: str
    open_ended: bool


@dataclass(frozen=True)
class Band:
    x: float
    width: float
    label: str
    kind: str  # "outage" or "overlap"


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    plot_left: int
    plot_bottom: float
    bars: list[Bar]
    bands: list[Band]
    ticks: list[Tick]


def _state_class(state: str | None, ended: bool) -> str:
    if state in ("success", "failed", "up_for_retry", "skipped", "restarting"):
        return state.replace("_", "-")
    return "ended" if ended else "running"


def chart(timeline: Timeline) -> Chart:
    """Lay out ``timeline`` on a fixed-width canvas (the outages are clipped to the plotted span)."""
    runs = timeline.executions
    points = [e.started_at for e in runs] + [e.alive_until for e in runs]
    points += [o.started_at for o in timeline.outages] + [o.ended_at for o in timeline.outages if o.ended_at]
    start, end = min(points), max(points)
    pad = max((end - start) * 0.04, timedelta(seconds=1))
    start, end = start - pad, end + pad
    span = (end - start).total_seconds()
    plot_width = WIDTH - LABEL - 20

    def x(at: datetime) -> float:
        return round(LABEL + (at - start).total_seconds() / span * plot_width, 1)

    bars = []
    for i, e in enumerate(runs):
        left, right = x(e.started_at), x(e.alive_until)
        where = f"{e.hostname or '?'} pid {e.pid or '?'}"
        bars.append(
            Bar(
                x=left,
                y=TOP + i * ROW,
                width=max(right - left, 2.0),
                label=f"try {e.try_number} · {where}",
                detail=(
                    f"try {e.try_number} on {where}, run {e.run_id}: {e.started_at:%H:%M:%S} → "
                    f"{e.ended_at.strftime('%H:%M:%S') if e.ended_at else 'no end recorded'} "
                    f"({e.state or 'running?'})"
                ),
                state=_state_class(e.state, e.ended_at is not None),
                open_ended=e.ended_at is None,
            )
        )
    bands = []
    for o in timeline.outages:
        left = x(max(o.started_at, start))
        right = x(min(o.ended_at or end, end))
        bands.append(Band(left, max(right - left, 1.0), f"scheduler down {o.seconds:.0f}s", "outage"))
    for i, later in enumerate(runs):
        for earlier in runs[:i]:
            overlap_end = min(earlier.alive_until, later.alive_until)
            if overlap_end > later.started_at:
                seconds = (overlap_end - later.started_at).total_seconds()
                left = x(later.started_at)
                bands.append(
                    Band(left, max(x(overlap_end) - left, 1.0), f"overlap {seconds:.1f}s", "overlap")
                )
    bottom = TOP + len(runs) * ROW + 4
    return Chart(WIDTH, int(bottom + AXIS), LABEL, bottom, bars, bands, _ticks(start, end, x))


def _ticks(start: datetime, end: datetime, x: Callable[[datetime], float]) -> list[Tick]:
    span = (end - start).total_seconds()
    step = next((s for s in _STEPS if span / s <= 8), _STEPS[-1])
    first = datetime.fromtimestamp((start.timestamp() // step + 1) * step, tz=start.tzinfo)
    fmt = "%H:%M:%S" if step < 86400 else "%Y-%m-%d"
    out, at = [], first
    while at < end:
        out.append(Tick(x(at), at.strftime(fmt)))
        at += timedelta(seconds=step)
    return out
