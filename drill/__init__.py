"""The crash drill: boot real Airflow, SIGKILL the scheduler mid-run, restart it late, report.

The project's proof harness, run from a checkout (``./dev drill``, i.e. ``python -m drill``); it is
not shipped in the wheel. Start reading at :mod:`drill.cli` (the phases and exit codes), then:

- what is proved, one module per capability, each with its collect / rows / invariants
  (:mod:`drill.capability`): :mod:`drill.writes` (warehouse writes), :mod:`drill.payments`,
  :mod:`drill.audit`, :mod:`drill.work` (the work meter), :mod:`drill.alerting`;
- the record and the report: :mod:`drill.attempts` (Airflow's record of the tasks),
  :mod:`drill.facts`, :mod:`drill.report`;
- the harness: :mod:`drill.session` (resources and cleanup), :mod:`drill.scenario` (the crash),
  :mod:`drill.dags`, :mod:`drill.airflow_home`, :mod:`drill.components`, :mod:`drill.cluster`,
  :mod:`drill.vendors`, :mod:`drill.watch`, :mod:`drill.work_meter`, and :mod:`drill.stack` (a bare
  Airflow the watchdog's tests and benchmark crash again and again), :mod:`drill.subprocess_run`
  (``python -m drill`` as the end-to-end tests run it);
- ``--scenario wedge``: :mod:`drill.wedge` (the kill inside the scheduler's critical section, the
  plain and the healing phase), :mod:`drill.pg_locks` (the metadata DB's sessions and locks),
  :mod:`drill.wedge_dag`, and its report, :mod:`drill.wedge_report`;
- ``--scenario storm``: :mod:`drill.storm` (the night, the crash), :mod:`drill.storm_crash` (what the
  lost variant destroys),
  :mod:`drill.storm_warehouse` (the warehouse's finite capacity, modelled in PostgreSQL),
  :mod:`drill.storm_dag`, and its report, :mod:`drill.storm_report`.
"""

from __future__ import annotations
