"""Capability: the wedge. A restarted scheduler blocked by its dead predecessor's open transaction.

What the wedge scenario (:mod:`drill.wedge`) found, recorded in :class:`WedgeFact`, and the report
built from it: the tries it took to land the SIGKILL inside the scheduler's critical section, the
orphaned metadata-DB session it left (backend pid, age, locks, the processes keeping its socket
open), the reset task instances the restarted scheduler never queued (the plain phase), and the
healing watchdog's page and the recovery it brought (the crashsafe phase). Pure functions of the
fact, like every capability (:mod:`drill.capability`); see docs/design.md, "How Airflow behaves on
a crash" and "Watchdog and alerting".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from airflow_crashsafe.component_identity.name import parse
from drill.table import align

if TYPE_CHECKING:
    from drill.facts import DrillFacts
    from drill.session import DrillSession

__all__ = [
    "TITLES",
    "WedgeFact",
    "carries_identity",
    "collect",
    "held",
    "inconclusive",
    "invariants",
    "is_wedge_page",
    "render",
    "rows",
    "section",
]

#: Side -> column title: plain Airflow alone, then with the crashsafe watchdog healing.
TITLES = {"plain": "plain Airflow", "crashsafe": "crashsafe (watch --heal)"}
#: Terminal DAG run states.
_FINISHED = ("success", "failed")


def carries_identity(w: WedgeFact) -> bool:
    """Whether the orphaned session's application_name names a scheduler job and the killed pid."""
    identity = parse(w.backend_application)
    return identity is not None and identity.component == "scheduler" and identity.pid == w.scheduler_pid


def is_wedge_page(key: str, summary: str) -> bool:
    """Whether an alert names the dead scheduler's open transaction (matched loosely, by its text)."""
    return "open transaction" in summary.lower() or "wedge" in key.lower()


@dataclass
class WedgeFact:
    """One wedge drill: the kill, the plain phase (no healing), the crashsafe phase (healing watchdog)."""

    #: Times the scheduler was frozen with the pool lock seen (one per try) and SIGKILLed.
    tries: int = 0
    kills: int = 0
    #: Whether a SIGKILL left the scheduler's session open, holding the pool lock.
    landed: bool = False
    killed_at: float | None = None
    restarted_at: float | None = None
    backend_pid: int | None = None
    backend_state: str = ""
    #: The orphaned transaction's age and locks when the plain phase gave up.
    backend_age: float | None = None
    locks: list[str] = field(default_factory=list)
    advisory_lock: bool = False
    #: Seconds from the killed scheduler's last heartbeat to the begin of its orphaned transaction.
    began_after_heartbeat: float | None = None
    #: Surviving processes the dead scheduler forked that still hold the session's socket.
    socket_holders: int = 0
    #: The killed scheduler's pid, and the ``application_name`` its orphaned session carried (the
    #: identity the plugin sets, by which the watchdog proves the session the dead scheduler's).
    scheduler_pid: int | None = None
    backend_application: str = ""
    tasks: int = 0
    #: Reset task instances still ``scheduled`` when the plain phase gave up, and since when.
    stuck: int = 0
    stuck_seconds: float = 0.0
    give_up: float = 0.0
    #: Whether the plain phase saw the wedge hold: TIs stuck and the session still open at give-up.
    wedged: bool = False
    #: The crashsafe phase: ``airflow-crashsafe watch --db-url ... --heal`` started at ``heal_started_at``.
    heal_available: bool = False
    heal_started_at: float | None = None
    page_at: float | None = None
    page_key: str = ""
    page_summary: str = ""
    backend_gone_at: float | None = None
    recovered_at: float | None = None
    run_state: str | None = None
    finished_at: float | None = None

    def since_restart(self, at: float | None) -> float | None:
        return None if at is None or self.restarted_at is None else at - self.restarted_at

    def since_heal(self, at: float | None) -> float | None:
        return None if at is None or self.heal_started_at is None else at - self.heal_started_at

    @property
    def finished(self) -> bool:
        return self.run_state in _FINISHED


def _s(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} s"


def collect(session: DrillSession, facts: DrillFacts) -> None:
    """Nothing to read back: the wedge scenario records its fact as it runs (:mod:`drill.wedge`)."""


def _backend(w: WedgeFact) -> str:
    return (
        f"backend {w.backend_pid} {w.backend_state or '?'} {_s(w.backend_age)}, "
        f"socket held by {w.socket_holders} orphaned processes"
    )


def rows(facts: DrillFacts, side: str) -> dict[str, str]:
    """Plain: the phase without healing; crashsafe: the phase with the healing watchdog."""
    w = facts.wedge
    if w is None or not w.landed:
        return {}
    if side == "plain":
        return {
            "restarted scheduler queued the reset tasks": (
                f"no: {w.stuck}/{w.tasks} stuck scheduled {_s(w.stuck_seconds)}, gave up"
                if w.wedged
                else "yes (no wedge)"
            ),
            "dead scheduler's open transaction": _backend(w),
            "page naming the cause": "none",
            "run finished": "no (gave up)" if w.wedged else (w.run_state or "no"),
        }
    if not w.heal_available or w.heal_started_at is None:
        return {"restarted scheduler queued the reset tasks": "not run (watchdog has no --heal)"}
    recovered = w.since_restart(w.recovered_at)
    return {
        "restarted scheduler queued the reset tasks": (
            f"yes, restart +{_s(recovered)} (watchdog +{_s(w.since_heal(w.recovered_at))})"
            if recovered is not None
            else "NO"
        ),
        "dead scheduler's open transaction": (
            f"ended restart +{_s(w.since_restart(w.backend_gone_at))}"
            if w.backend_gone_at is not None
            else "STILL OPEN"
        ),
        "page naming the cause": (
            f"restart +{_s(w.since_restart(w.page_at))} (watchdog +{_s(w.since_heal(w.page_at))})"
            if w.page_at is not None
            else "NONE"
        ),
        "run finished": (
            f"{w.run_state}, restart +{_s(w.since_restart(w.finished_at))}" if w.finished else "NO"
        ),
    }


def _locks(w: WedgeFact) -> str:
    """The locks that block (row locks, the advisory lock) first; plain read locks only counted."""
    strong = [lock for lock in w.locks if not lock.startswith("AccessShareLock")]
    if w.advisory_lock:
        strong.append("the critical section's advisory lock")
    reads = [lock.split(" on ", 1)[-1] for lock in w.locks if lock.startswith("AccessShareLock")]
    return ", ".join(strong) + (f"; AccessShareLock on {', '.join(reads)}" if reads else "")


def section(facts: DrillFacts) -> list[str]:
    """How the kill landed, the orphan's locks, and the crashsafe phase's timeline and page."""
    w = facts.wedge
    if w is None:
        return []
    if not w.landed:
        return [f"SIGKILL never landed inside the critical section ({w.tries} tries, {w.kills} kills)."]
    locks = _locks(w)
    lines = [
        f"SIGKILL landed inside the scheduler's critical section on try {w.tries} ({w.kills} kill(s)); "
        f"backend {w.backend_pid} held: {locks or '?'}; its transaction began "
        f"{_s(w.began_after_heartbeat)} after the scheduler's last heartbeat; its application_name "
        f"was {w.backend_application!r} (scheduler pid {w.scheduler_pid}).",
        f"Plain phase: the restarted scheduler heartbeats; waited {w.give_up:.0f} s for it to queue "
        f"the {w.tasks} reset tasks.",
    ]
    if w.heal_started_at is not None:
        lines.append(
            "Crashsafe phase: `airflow-crashsafe watch --db-url ... --heal` started "
            f"restart +{_s(w.since_restart(w.heal_started_at))}; times below count from the restart "
            "(the plain phase's wait included) and from the watchdog's start:"
        )
        lines += align(
            [
                ["page", _s(w.since_restart(w.page_at)), _s(w.since_heal(w.page_at))],
                ["recovery", _s(w.since_restart(w.recovered_at)), _s(w.since_heal(w.recovered_at))],
                ["run finished", _s(w.since_restart(w.finished_at)), _s(w.since_heal(w.finished_at))],
            ],
            "  ",
        )
        if w.page_summary:
            lines.append(f"  page: {w.page_summary}")
    return lines


def inconclusive(facts: DrillFacts) -> list[str]:
    """Why the wedge drill proved nothing (exit 3)."""
    w = facts.wedge
    if w is None:
        return []
    if not w.landed:
        return ["the SIGKILL never left the scheduler's session open holding the pool lock"]
    if not w.wedged:
        return ["the restarted scheduler was not wedged (no reset task stayed scheduled)"]
    if not w.heal_available:
        return ["the watchdog has no --heal: the crashsafe phase could not run"]
    return []


def invariants(facts: DrillFacts) -> list[str]:
    """The crashsafe phase's promises: a page naming the cause, recovery, and a finished run."""
    w = facts.wedge
    if w is None or inconclusive(facts) or w.heal_started_at is None:
        return []
    broken = []
    if not carries_identity(w):
        broken.append(
            f"the dead scheduler's session carried no identity of scheduler pid {w.scheduler_pid} "
            f"(application_name {w.backend_application!r}): --heal can only page it"
        )
    if w.page_at is None:
        broken.append("the healing watchdog never paged the dead scheduler's open transaction")
    if w.recovered_at is None:
        broken.append(f"the restarted scheduler never queued the {w.stuck} reset tasks after healing")
    if not w.finished:
        broken.append(f"the run did not finish after healing (state {w.run_state or '?'})")
    return broken


def held(facts: DrillFacts) -> list[str]:
    w = facts.wedge
    if w is None or invariants(facts) or inconclusive(facts):
        return []
    return [
        f"the watchdog paged the open transaction {_s(w.since_heal(w.page_at))} after it started, "
        f"the scheduler queued again {_s(w.since_heal(w.recovered_at))} after it, and the run finished."
    ]


def _when(epoch: float | None) -> str:
    return "?" if epoch is None else datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%H:%M:%S UTC")


def render(facts: DrillFacts) -> str:
    """The wedge drill's report: the phases side by side, the kill and the timeline, the verdict."""
    w = facts.wedge
    outage = w.since_restart(w.killed_at) if w else None
    down = _s(None if outage is None else -outage)
    lines = [
        f"Wedge drill: scheduler SIGKILLed inside its critical section at "
        f"{_when(w.killed_at if w else None)}, down {down}, then restarted",
        "",
    ]
    columns = {side: rows(facts, side) for side in TITLES}
    names = list(dict.fromkeys(name for r in columns.values() for name in r))
    if names:
        lines += align(
            [
                ["", *TITLES.values()],
                *([n, *(columns[s].get(n, "") for s in TITLES)] for n in names),
            ],
            "",
        )
        lines.append("")
    lines += section(facts)
    lines.append("")
    broken = invariants(facts)
    if broken:
        lines += ["CRASHSAFE INVARIANTS BROKEN:", *(f"  - {b}" for b in broken)]
    elif not inconclusive(facts):
        lines += [f"Crashsafe invariants hold: {line}" for line in held(facts)]
    lines += [f"Note: {n}" for n in (*inconclusive(facts), *facts.notes)]
    if facts.wall_seconds:
        lines.append(f"Drill wall time: {facts.wall_seconds:.0f} s")
    return "\n".join(lines)
