"""``airflow-crashsafe scan`` on public DAG repositories, scored against labels made by reading them.

Usage::

    python -m benchmarks.scan_realworld [--repos-dir /work/realworld] [--port-dir DIR]
        [--split tune|heldout|all] [--json PATH] [--timeout 1800]
    python -m benchmarks.scan_realworld checkout --mirrors DIR [--repos-dir /work/realworld]

The repositories, commits, DAG and plugins folders and the tune/held-out split are in
``tests/data/scan_realworld/manifest.toml``; the labels in ``labels.csv``. Each repository's DAG
folder is scanned as a user would point the scan at a checkout: ``--format json`` with the default
gate (``--fail-on risky``), its plugins folder as ``[core] plugins_folder`` and on ``PYTHONPATH``
with the manifest's ``python_path``, in a fresh ``AIRFLOW_HOME``. ``--port-dir`` first copies each
repository there through ``benchmarks.port_airflow2`` (Airflow 2 paths rewritten) and scans the
copy. Per split and overall it prints the tasks labelled, the share the scan named, risky recall
and precision, false-safe tasks, the unknown share and each repository's gate exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.port_airflow2 import port_tree
from benchmarks.realworld_corpus import (
    CheckoutError,
    Repo,
    checkout,
    load_labels,
    load_manifest,
    repo_dir,
    verify_checkouts,
)
from benchmarks.realworld_metrics import Label, ScannedTask, match_labels, relative_file, score

__all__ = ["main", "report", "scan_repo", "scanned_tasks"]

DEFAULT_REPOS = Path("/work/realworld")


def _scan_command() -> list[str]:
    script = Path(sys.executable).with_name("airflow-crashsafe")
    return [str(script)] if script.exists() else ["airflow-crashsafe"]


def scan_repo(repo: Repo, root: Path, timeout: float) -> dict[str, Any]:
    """Run the scan on each DAG folder of ``repo`` checked out at ``root``; raw JSON and exit codes."""
    plugins = [str(root / p) for p in repo.plugin_folders]
    path = plugins + [str(root / p) for p in repo.python_path]
    runs = []
    with tempfile.TemporaryDirectory(prefix="realworld-home-") as home:
        env = {
            **os.environ,
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        }
        if plugins:
            env["AIRFLOW__CORE__PLUGINS_FOLDER"] = plugins[0]
        for folder in repo.dag_folders:
            started = time.monotonic()
            try:
                proc = subprocess.run(
                    [*_scan_command(), "scan", str(root / folder), "--format", "json"],
                    capture_output=True,
                    text=True,
                    env={**env, "AIRFLOW__CORE__DAGS_FOLDER": str(root / folder)},
                    timeout=timeout,
                    check=False,
                )
                code, out, err = proc.returncode, proc.stdout, proc.stderr
            except subprocess.TimeoutExpired:
                code, out, err = None, "", f"timed out after {timeout:.0f} s"
            try:
                data = json.loads(out) if out.strip() else None
            except json.JSONDecodeError:
                data = None
            runs.append(
                {
                    "folder": folder,
                    "exit_code": code,
                    "seconds": round(time.monotonic() - started, 1),
                    "report": data,
                    "error": None if data is not None else (err.strip().splitlines() or ["no output"])[-1],
                }
            )
    return {"repo": repo.name, "runs": runs}


def scanned_tasks(repo: Repo, root: Path, result: dict[str, Any]) -> list[ScannedTask]:
    """The scan's tasks with files relative to the checkout (a ported copy keeps the same layout)."""
    resolved = str(root.resolve())
    return [
        ScannedTask(repo.name, relative_file(str(Path(t["file"]).resolve()), resolved), t["dag_id"],
                    t["task_id"], t["verdict"], t.get("category", ""))
        for run in result["runs"] if run["report"]
        for t in run["report"]["tasks"]
    ]  # fmt: skip


def report(
    repos: Sequence[Repo], labels: Sequence[Label], results: dict[str, dict[str, Any]], roots: dict[str, Path]
) -> dict[str, Any]:
    """Scores per split and overall, per-repository gate and import figures, unmatched labels."""
    split_of = {r.name: r.split for r in repos}
    tasks = [t for r in repos for t in scanned_tasks(r, roots[r.name], results[r.name])]
    chosen = [label for label in labels if label.repo in split_of]
    matches = match_labels(chosen, tasks)
    groups = {s: [m for m in matches if split_of[m.label.repo] == s] for s in ("tune", "heldout")}
    per_repo = {}
    for r in repos:
        runs = results[r.name]["runs"]
        mine = [m for m in matches if m.label.repo == r.name]
        per_repo[r.name] = {
            "split": r.split,
            "gate_exit_codes": [run["exit_code"] for run in runs],
            "scan_failed": [run["error"] for run in runs if run["report"] is None],
            "import_errors": sum(len(run["report"]["import_errors"]) for run in runs if run["report"]),
            "scan_tasks": sum(len(run["report"]["tasks"]) for run in runs if run["report"]),
            "seconds": sum(run["seconds"] for run in runs),
            **score(mine),
        }
    return {
        "overall": score(matches),
        **{split: score(ms) for split, ms in groups.items()},
        "repos": per_repo,
        "unmatched": [f"{m.label.repo}:{m.label.file}:{m.label.task_id}" for m in matches if not m.tasks],
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


COLUMNS = (
    "tasks",
    "named_share",
    "risky_recall",
    "risky_precision",
    "false_safe",
    "unknown_share",
    "agreement",
)


def print_table(result: dict[str, Any], title: str) -> None:
    print(f"\n{title}")
    print(f"{'group':<56}" + "".join(f"{c:>16}" for c in COLUMNS) + f"{'gate exit':>12}")
    for name in ("tune", "heldout", "overall"):
        print(f"{name:<56}" + "".join(f"{_fmt(result[name][c]):>16}" for c in COLUMNS))
    for name, row in result["repos"].items():
        gate = ",".join(_fmt(c) for c in row["gate_exit_codes"])
        print(
            f"  {name + ' (' + row['split'] + ')':<54}"
            + "".join(f"{_fmt(row[c]):>16}" for c in COLUMNS)
            + f"{gate:>12}"
        )
    print(f"{len(result['unmatched'])} labelled tasks not named by the scan")


def _prepare(repos: Sequence[Repo], repos_dir: Path, port_dir: Path | None) -> tuple[dict[str, Path], dict]:
    roots, ported = {}, {}
    for r in repos:
        source = repo_dir(repos_dir, r.name)
        if port_dir is None:
            roots[r.name] = source
            continue
        roots[r.name] = repo_dir(port_dir, r.name)
        ported[r.name] = port_tree(source, roots[r.name])
    return roots, ported


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scan_realworld", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", nargs="?", choices=("run", "checkout"), default="run")
    parser.add_argument("--repos-dir", type=Path, default=DEFAULT_REPOS)
    parser.add_argument("--mirrors", type=Path, help="checkout: folder of <owner>+<name>/repo bare git dirs")
    parser.add_argument("--port-dir", type=Path, help="scan ported copies made here instead of the checkouts")
    parser.add_argument("--split", choices=("tune", "heldout", "all"), default="all")
    parser.add_argument("--json", type=Path, help="also write the full result here")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per DAG folder")
    args = parser.parse_args(argv)
    repos = [r for r in load_manifest() if args.split in ("all", r.split)]
    if args.command == "checkout":
        if args.mirrors is None:
            parser.error("checkout needs --mirrors")
        for r in repos:
            missing = checkout(r, repo_dir(args.mirrors, r.name) / "repo", args.repos_dir)
            print(f"{r.name} @ {r.commit[:12]}: {len(missing)} files absent from the snapshot {missing[:3]}")
        return 0
    try:
        verify_checkouts(repos, args.repos_dir)
    except CheckoutError as exc:
        print(f"scan_realworld: {exc}", file=sys.stderr)
        return 2
    roots, ported = _prepare(repos, args.repos_dir, args.port_dir)
    results = {r.name: scan_repo(r, roots[r.name], args.timeout) for r in repos}
    result = report(repos, load_labels(), results, roots)
    result["mode"] = "ported" if args.port_dir else "as checked out"
    result["ported"] = ported
    print_table(result, f"airflow-crashsafe scan on the real-world corpus, {result['mode']}")
    for name, info in ported.items():
        print(f"  {name}: providers missing here: {', '.join(info['providers_missing']) or 'none'}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
