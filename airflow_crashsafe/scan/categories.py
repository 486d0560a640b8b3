"""What each verdict category means and how to fix it: the SARIF rules' texts (docs/scan.md, "Verdicts").

Data only. A category the rules give that is not here still gets a rule, described by its verdict
(:func:`describe`), so a new rule never makes the report invalid.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["CATEGORIES", "Category", "describe"]

_LEDGER = "run it inside effect() (airflow_crashsafe.effects) so a re-run after success sends nothing"
_MERGE = "write with NaturalKeyMergeOperator or PartitionOverwriteOperator so a re-run replaces its rows"
_DECLARE = "if running it twice is harmless, say why with replay_safe(task, reason=...)"


class Category(NamedTuple):
    verdict: str
    short: str
    meaning: str
    fix: str


CATEGORIES: dict[str, Category] = {
    "append": Category(
        "risky",
        "Appends rows again on a re-run",
        "An INSERT without conflict handling, COPY FROM a file, insert_rows or to_sql(if_exists='append'): "
        "a task run twice writes its rows twice.",
        _MERGE,
    ),
    "increment": Category(
        "risky",
        "Increments a value again on a re-run",
        "x = x + n in an UPDATE, upsert or MERGE: each run adds again.",
        "compute the value from the source instead of adding to it, or FencedSQLOperator so a committed "
        "slot is not run again",
    ),
    "generated_key_merge": Category(
        "risky",
        "Upserts under a key generated per run",
        "An upsert or MERGE whose key comes from nextval() or gen_random_uuid(): it never matches the rows "
        "of the first run, so a re-run inserts them again.",
        "merge on the business key (NaturalKeyMergeOperator refuses generated keys)",
    ),
    "overwrite_not_atomic": Category(
        "risky",
        "Deletes and inserts outside one transaction or outside the run's partition",
        "DELETE then INSERT that are not one transaction, or not scoped to the run: a crash between them "
        "loses data, two attempts can both insert.",
        "PartitionOverwriteOperator (one fenced transaction, scoped to the run's partition)",
    ),
    "http_mutating": Category(
        "risky",
        "Sends a mutating HTTP request again on a re-run",
        "POST/PUT/PATCH/DELETE without an Idempotency-Key derived from the run (a key made per attempt is "
        "no key).",
        "IdempotentHttpOperator, or an Idempotency-Key derived from the run that the vendor honours",
    ),
    "notification": Category(
        "risky",
        "Sends a message again on a re-run",
        "Email, Slack, Teams, SMS: a re-run sends the message again.",
        _LEDGER,
    ),
    "queue_publish": Category(
        "risky",
        "Publishes a message again on a re-run",
        "SQS, SNS, Kafka, Pub/Sub: a re-run publishes again; consumers see it twice.",
        _LEDGER + ", or publish with a deduplication id derived from the run",
    ),
    "object_write_random": Category(
        "risky",
        "Writes an object under a random or time-based name",
        "Each run writes another object, so a re-run leaves a duplicate behind.",
        "name the object from the run (e.g. f'{ds}/part.parquet') so a re-run overwrites it",
    ),
    "job_submission": Category(
        "risky",
        "Submits an external job again on a re-run",
        "An external job submitted without a client token: a re-run starts it again.",
        "submit with a client token / idempotency token derived from the run",
    ),
    "trigger_dag": Category(
        "risky",
        "Triggers another DAG run again on a re-run",
        "TriggerDagRunOperator without a trigger_run_id derived from this run.",
        "trigger_run_id='{{ run_id }}_<target>' with skip_when_already_exists=True",
    ),
    "opaque_command": Category(
        "unknown",
        "Runs a command the scan cannot read",
        "A shell script, dbt run, python etl.py, a subprocess: what it changes is not visible here.",
        _DECLARE + "; otherwise make the command key its writes by the run",
    ),
    "opaque_container": Category(
        "unknown",
        "Runs a container the scan cannot read",
        "KubernetesPodOperator, DockerOperator and the like: the image's effect is not visible here.",
        _DECLARE + "; otherwise make the container key its writes by the run",
    ),
    "procedure_call": Category(
        "unknown",
        "Calls a stored procedure",
        "CALL / EXEC / a DO block: the procedure's body is not visible here.",
        _DECLARE,
    ),
    "unparsed_sql": Category(
        "unknown",
        "SQL the scan cannot parse or read",
        "SQL that does not parse, or that comes from a Variable.",
        _DECLARE,
    ),
    "dynamic_sql": Category(
        "unknown",
        "SQL built at run time",
        "The statement is assembled from data when the task runs.",
        _DECLARE,
    ),
    "unreadable_callable": Category(
        "unknown",
        "A callable whose source cannot be read",
        "The Python callable's source is not available, so what it does is not known.",
        _DECLARE + "; else wrap its side effect in effect()",
    ),
    "unreadable_task": Category(
        "unknown",
        "A task the scan could not read",
        "A template that does not render, or an argument only known when the file runs (a file read from "
        "its syntax tree).",
        _DECLARE,
    ),
    "unknown_operator": Category(
        "unknown",
        "An operator no rule knows",
        "An operator from a library the rules do not know, or one not installed where the scan runs.",
        "install its provider where the scan runs; " + _DECLARE,
    ),
    "import_error": Category(
        "unknown",
        "A DAG file that does not import where the scan runs",
        "The file failed to import, ended its process or ran past the time limit; its tasks are read from "
        "its syntax tree where they can be, and the default gate fails.",
        "make the file import where the scan runs (install the providers it needs, port Airflow 2 imports), "
        "then scan again",
    ),
}


def describe(category: str, verdict: str) -> Category:
    """The texts of ``category``; a generic one from ``verdict`` for a category not in the table."""
    known = CATEGORIES.get(category)
    if known is not None:
        return known
    if verdict == "risky":
        return Category(
            verdict, f"Risky: {category}", "A re-run of this task changes the outside world again.", _MERGE
        )
    return Category(
        verdict,
        f"Unknown: {category}",
        "Nothing static can decide whether this task is safe to re-run.",
        _DECLARE,
    )
