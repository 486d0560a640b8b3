"""The real-world corpus's manifest and labels, and the checkouts of its repositories.

The repositories themselves are never kept in this repository: ``checkout`` writes each one's tree
at the recorded commit from a bare git directory (what the search tool's ``fetch`` gives) into
``<repos-dir>/<owner>+<name>/`` and stamps it with the commit; ``verify_checkouts`` refuses to run
on a folder that is missing or at another commit.
"""

from __future__ import annotations

import csv
import subprocess
from dataclasses import dataclass
from pathlib import Path

import tomllib

from benchmarks.realworld_metrics import Label

__all__ = [
    "CORPUS",
    "STAMP",
    "CheckoutError",
    "Repo",
    "checkout",
    "checkout_commit",
    "load_labels",
    "load_manifest",
    "repo_dir",
    "verify_checkouts",
]

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "scan_realworld"
STAMP = ".realworld-commit"


class CheckoutError(Exception):
    """A repository folder is missing, or holds another commit than the manifest records."""


@dataclass(frozen=True)
class Repo:
    """One repository of the manifest."""

    name: str
    commit: str
    licence: str
    split: str
    dag_folders: tuple[str, ...]
    plugin_folders: tuple[str, ...]
    python_path: tuple[str, ...]
    labelled_files: tuple[str, ...]


def load_manifest(path: Path = CORPUS / "manifest.toml") -> list[Repo]:
    data = tomllib.loads(path.read_text())
    return [
        Repo(
            name=r["name"],
            commit=r["commit"],
            licence=r["licence"],
            split=r["split"],
            dag_folders=tuple(r["dag_folders"]),
            plugin_folders=tuple(r.get("plugin_folders", ())),
            python_path=tuple(r.get("python_path", ())),
            labelled_files=tuple(r.get("labelled_files", ())),
        )
        for r in data["repo"]
    ]


def load_labels(path: Path = CORPUS / "labels.csv") -> list[Label]:
    with path.open(newline="") as fh:
        return [
            Label(r["repo"], r["file"], r["dag_id"], r["task_id"], r["label"], r["category"])
            for r in csv.DictReader(fh)
        ]


def repo_dir(repos_dir: Path, name: str) -> Path:
    """``owner/name`` lives in ``<repos_dir>/owner+name``."""
    return repos_dir / name.replace("/", "+", 1)


def checkout_commit(folder: Path) -> str | None:
    """The commit a folder holds: its stamp, else ``git rev-parse HEAD`` of a git checkout."""
    stamp = folder / STAMP
    if stamp.is_file():
        return stamp.read_text().strip()
    if (folder / ".git").exists():
        out = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip() or None
    return None


def verify_checkouts(repos: list[Repo], repos_dir: Path) -> None:
    """Raise naming every repository that is missing or at the wrong commit, and how to fix it."""
    problems = []
    for repo in repos:
        folder = repo_dir(repos_dir, repo.name)
        if not folder.is_dir():
            problems.append(f"{repo.name}: {folder} does not exist")
            continue
        have = checkout_commit(folder)
        if have != repo.commit:
            problems.append(f"{repo.name}: {folder} holds {have or 'no recorded commit'}, want {repo.commit}")
    if problems:
        raise CheckoutError(
            "the corpus repositories are not checked out at the recorded commits:\n  "
            + "\n  ".join(problems)
            + "\nfetch each repository (tests/data/scan_realworld/README.md, 'Fetching') and run "
            "`python -m benchmarks.scan_realworld checkout --mirrors <folder of bare git dirs>`."
        )


def checkout(repo: Repo, git_dir: Path, repos_dir: Path) -> list[str]:
    """Write ``repo``'s tree at its commit from a bare git dir; returns the paths it could not write.

    Snapshots can lack large blobs; those files are skipped (and returned) rather than failing the
    whole tree, the way ``git archive`` would.
    """
    folder = repo_dir(repos_dir, repo.name)
    folder.mkdir(parents=True, exist_ok=True)
    listing = subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "-r", "-z", repo.commit],
        capture_output=True,
        check=True,
    ).stdout.decode()
    missing = []
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind != "blob" or mode == "120000":
            continue
        blob = subprocess.run(
            ["git", "--git-dir", str(git_dir), "cat-file", "blob", sha], capture_output=True
        )
        if blob.returncode != 0:
            missing.append(path)
            continue
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob.stdout)
    (folder / STAMP).write_text(repo.commit + "\n")
    return missing
