"""Classify a shell command (``BashOperator``): the few commands whose effect is known, else unknown.

``echo``/``sleep``/``date`` and friends are pure; ``curl`` is HTTP (a body or a mutating ``-X``
without a run-derived ``Idempotency-Key`` is risky); ``psql -c``/``mysql -e`` carry SQL that is
classified like an operator's; ``mail``/``sendmail`` notify; ``aws s3 cp`` and ``gsutil cp`` write
objects. Anything else (a script, ``dbt run``, ``python etl.py``) is opaque: unknown.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection

from airflow_crashsafe.scan.model import Finding, Reason
from airflow_crashsafe.scan.sql import classify_sql

__all__ = ["classify_bash"]

_PURE = {
    "echo", "sleep", "date", "true", "false", "ls", "cat", "test", "[", "printf", "exit", "set", "export",
    "cd", "mkdir", "pwd", "env", "whoami", "hostname", "wc", "grep", "head", "tail", "du", "df", "find",
    # files on the worker's own disk: scratch space a re-run rewrites, not the outside world
    "rm", "rmdir", "cp", "mv", "touch", "unzip", "gunzip", "gzip", "zcat", "tar", "sed", "awk", "cut", "tr",
    "sort", "uniq", "iconv", "jq", "chmod", "basename", "dirname", "md5sum", "sha256sum",
    "ln", "stat", "diff", "paste", "split", "column", "seq",
}  # fmt: skip
_RANDOM = re.compile(r"\$RANDOM|uuidgen|\$\(date[^)]*%[sN]|\$\$|mktemp")
_SQL_CLIENTS = {"psql": ("-c", "--command"), "mysql": ("-e", "--execute"), "snowsql": ("-q", "--query")}
_DIALECT = {"psql": "postgres", "mysql": "mysql", "snowsql": "snowflake"}


def _segments(command: str) -> list[list[str]]:
    out: list[list[str]] = []
    for part in re.split(r"&&|\|\||;|\||\n", command):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            words = part.split()
        if words:
            out.append(words)
    return out


def _curl(words: list[str], markers: Collection[str], text: str) -> Finding:
    method = "GET"
    for i, w in enumerate(words):
        if w in {"-X", "--request"} and i + 1 < len(words):
            method = words[i + 1].upper()
        elif (
            w in {"-d", "--data", "--data-raw", "--data-binary", "-F", "--form", "--json"} and method == "GET"
        ):
            method = "POST"
    if method in {"GET", "HEAD"}:
        return Finding("safe", "http_get", [Reason("curl GET reads", text)])
    keys = [w for w in words if "idempotency-key" in w.lower()]
    if keys and any(m in k for k in keys for m in markers):
        return Finding(
            "safe", "http_keyed", [Reason(f"curl {method} with a run-derived idempotency key", text)]
        )
    return Finding(
        "risky",
        "http_mutating",
        [Reason(f"curl {method} without a run-derived idempotency key: a re-run sends it again", text)],
        "IdempotentHttpOperator(http_conn_id=..., endpoint=..., method=..., json=..., "
        "target_honours_keys=...)",
    )


_APPEND_REDIRECT = re.compile(r"(?<![0-9&])>>\s*(?!/tmp/|/dev/|\$TMPDIR|\$\{TMPDIR)(\S+)")


def classify_bash(command: str, *, markers: Collection[str], conn_hint: str = "...") -> list[Finding]:
    """One finding per command of a shell script (pure commands give none)."""
    findings: list[Finding] = []
    for match in _APPEND_REDIRECT.finditer(command):
        findings.append(
            Finding(
                "risky",
                "append",
                [
                    Reason(
                        f"output appended to {match.group(1)} (>>): a re-run appends it again", match.group(0)
                    )
                ],
                "write to a file named from the run with > (a re-run replaces it)",
            )
        )
    for words in _segments(command):
        head = words[0].rsplit("/", 1)[-1]
        text = " ".join(words)[:160]
        if head in _PURE:
            continue
        if head == "curl":
            findings.append(_curl(words, markers, text))
        elif head in _SQL_CLIENTS:
            flags = _SQL_CLIENTS[head]
            sql = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in flags), None)
            if sql is None:
                findings.append(
                    Finding(
                        "unknown",
                        "opaque_command",
                        [Reason(f"{head} runs a script file the scan does not read", text)],
                    )
                )
                continue
            single = "-1" in words or "--single-transaction" in words
            facts = classify_sql(sql, dialect=_DIALECT[head], transactional=single, markers=markers)
            for f in facts.findings:
                f.reasons = [Reason(r.why, r.evidence or text) for r in f.reasons]
                if f.verdict == "risky" and not f.fix:
                    f.fix = (
                        "a crashsafe SQL operator (NaturalKeyMergeOperator / PartitionOverwriteOperator / "
                        f"FencedSQLOperator) with conn_id={conn_hint!r}"
                    )
            findings.extend(facts.findings)
        elif head in {"mail", "mailx", "sendmail"}:
            findings.append(
                Finding(
                    "risky",
                    "notification",
                    [Reason("a mail is sent again on a re-run", text)],
                    'effect("<task>", ...) around the send, in a @task',
                )
            )
        elif (head == "aws" and words[1:3] in (["s3", "cp"], ["s3", "sync"])) or (
            head == "gsutil" and "cp" in words
        ):
            if _RANDOM.search(command):
                findings.append(
                    Finding(
                        "risky",
                        "object_write_random",
                        [Reason("an object written under a random name", text)],
                        "name the object from the run ({{ ds }})",
                    )
                )
            else:
                findings.append(
                    Finding(
                        "safe",
                        "object_write_fixed",
                        [Reason("an object copy to a fixed name overwrites itself", text)],
                    )
                )
        else:
            findings.append(
                Finding(
                    "unknown",
                    "opaque_command",
                    [Reason(f"{head}: what this command does is not readable here", text)],
                    "replay_safe(task, reason=...) if running it twice is harmless; "
                    "otherwise make the script idempotent",
                )
            )
    return findings
