"""Which files a scan reads, what goes on ``sys.path``, and the time limit: as Airflow's parser has them.

Files are listed by Airflow itself (``.airflowignore`` and ``[core] dag_discovery_safe_mode``
honoured). A DAG file imports with the folder it was found in, the plugins folder and
``$AIRFLOW_HOME/config`` on ``sys.path``, as the dag-processor imports it; the same folders are
where static analysis looks for the repository's own modules.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from airflow_crashsafe.errors import ConfigurationError

__all__ = [
    "DEFAULT_TIMEOUT",
    "dag_files",
    "default_plugins_folder",
    "default_timeout",
    "repository_roots",
    "search_folders",
]

#: Airflow's own default for ``[core] dagbag_import_timeout``.
DEFAULT_TIMEOUT = 30.0
#: Files that mark the top of a checked-out repository.
_REPOSITORY_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")


def default_timeout() -> float:
    """``[core] dagbag_import_timeout``; Airflow's default when it is unset or turned off (<= 0)."""
    from airflow.configuration import conf

    value = conf.getfloat("core", "dagbag_import_timeout", fallback=DEFAULT_TIMEOUT)
    return value if value > 0 else DEFAULT_TIMEOUT


def default_plugins_folder() -> str:
    """``[core] plugins_folder``."""
    from airflow.configuration import conf

    return str(conf.get("core", "plugins_folder", fallback="") or "")


def _config_folder() -> str:
    from airflow import settings

    return os.path.join(settings.AIRFLOW_HOME, "config")


def _root_of(path: str) -> str:
    resolved = Path(path).resolve()
    return str(resolved if resolved.is_dir() else resolved.parent)


def dag_files(paths: Sequence[str]) -> list[tuple[str, str]]:
    """``(root, file)`` for every DAG file under ``paths``, each file once, in a stable order.

    Raises :class:`~airflow_crashsafe.errors.ConfigurationError` for a path that does not exist.
    """
    from airflow.configuration import conf
    from airflow.utils.file import list_py_file_paths

    safe_mode = conf.getboolean("core", "dag_discovery_safe_mode", fallback=True)
    found: dict[str, str] = {}
    for path in paths:
        if not os.path.exists(path):
            raise ConfigurationError(f"scan: {path} does not exist; give a DAG file or folder.")
        root = _root_of(path)
        listed = [path] if os.path.isfile(path) else list_py_file_paths(path, safe_mode=safe_mode)
        for file in sorted(str(Path(f).resolve()) for f in listed):
            found.setdefault(file, root)
    return [(root, file) for file, root in found.items()]


def search_folders(roots: Sequence[str], plugins_folder: str | None) -> list[str]:
    """The folders a DAG file's imports are found in: its folder, the plugins folder, the config folder."""
    plugins = default_plugins_folder() if plugins_folder is None else plugins_folder
    folders = [*roots, plugins, _config_folder()]
    return [str(Path(f).resolve()) for f in dict.fromkeys(folders) if f and os.path.isdir(f)]


def repository_roots(folders: Sequence[str]) -> list[str]:
    """The checkouts the DAG folders sit in (the nearest folder above with ``.git``, ``setup.py``, ...)
    and the folders on ``PYTHONPATH``: where the repository's own packages are.

    Only static analysis looks for modules in the checkouts (a package the deployment installs from
    the same repository, ``data_pipeline/`` beside ``dags/``); the import keeps Airflow's ``sys.path``.
    """
    found: list[str] = []
    for folder in folders:
        for candidate in [Path(folder), *list(Path(folder).parents)[:4]]:
            if any((candidate / marker).exists() for marker in _REPOSITORY_MARKERS):
                found.append(str(candidate))
                break
    found += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isdir(p)]
    return [str(Path(f).resolve()) for f in dict.fromkeys(found) if f not in folders]
