"""How the package presents itself to Airflow: entry points, provider info, plugin, public names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.floor  # CI's floor subset (docs/packaging.md, "Version floor")

DIST = "airflow-crashsafe"
EXPECTED_ALL = [
    "CrashsafeError",
    "FencedOut",
    "IdempotencyConflict",
    "fenced_transaction",
    "recovery_admission",
    "replay_safe",
    "__version__",
]


def _own_entry_points(group: str) -> list[metadata.EntryPoint]:
    return [ep for ep in metadata.entry_points(group=group) if ep.value.startswith("airflow_crashsafe")]


def _run_python(code: str, airflow_home: Path) -> Any:
    """Run ``code`` in a fresh interpreter with its own AIRFLOW_HOME; it prints one JSON line last."""
    env = {**os.environ, "AIRFLOW_HOME": str(airflow_home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    airflow_home.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _files_under(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def test_provider_entry_point_resolves_to_get_provider_info() -> None:
    """The apache_airflow_provider entry point loads airflow_crashsafe.provider_info.get_provider_info."""
    from airflow_crashsafe.provider_info import get_provider_info

    (entry_point,) = _own_entry_points("apache_airflow_provider")
    assert entry_point.name == "provider_info"
    assert entry_point.dist is not None
    assert entry_point.dist.name == DIST
    assert entry_point.load() is get_provider_info


def test_plugin_entry_point_resolves_to_plugin_class() -> None:
    """The airflow.plugins entry point `crashsafe` loads CrashsafePlugin."""
    from airflow_crashsafe.plugin import CrashsafePlugin

    (entry_point,) = _own_entry_points("airflow.plugins")
    assert entry_point.name == "crashsafe"
    assert entry_point.load() is CrashsafePlugin


def test_console_script_entry_point_resolves_to_cli_main() -> None:
    """The airflow-crashsafe console script runs airflow_crashsafe.cli.main:main."""
    from airflow_crashsafe.cli.main import main

    (entry_point,) = [ep for ep in metadata.entry_points(group="console_scripts") if ep.name == DIST]
    assert entry_point.load() is main


def test_provider_info_declares_crashsafe_options() -> None:
    """Provider info declares every [crashsafe] option of config.OPTIONS and nothing else."""
    from airflow_crashsafe.config import OPTIONS
    from airflow_crashsafe.provider_info import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == DIST
    assert set(info["config"]) == {"crashsafe"}
    assert info["config"]["crashsafe"]["options"] == OPTIONS


def test_readme_documents_every_option() -> None:
    """README's [crashsafe] options table has one row per option in config.OPTIONS, with its default."""
    from airflow_crashsafe.config import OPTIONS

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("### `[crashsafe]` options", 1)[1].split("\n#", 1)[0]
    rows = {line.split("|")[1].strip(" `"): line for line in section.splitlines() if line.startswith("| `")}
    assert set(rows) == set(OPTIONS)
    for name, option in OPTIONS.items():
        assert f"`{option['default']}`" in rows[name] or not option["default"], name


def test_provider_info_is_valid_against_airflow_schema() -> None:
    """Provider info validates against the provider_info schema shipped with the installed Airflow."""
    import airflow
    import jsonschema  # type: ignore[import-untyped]

    from airflow_crashsafe.provider_info import get_provider_info

    schema_path = Path(airflow.__file__).parent / "provider_info.schema.json"
    jsonschema.validate(get_provider_info(), json.loads(schema_path.read_text()))


def test_provider_info_declares_the_crashsafe_hook() -> None:
    """Provider info's hook module and connection type are CrashsafeHook's, under one integration."""
    from airflow_crashsafe.hooks.crashsafe import CrashsafeHook
    from airflow_crashsafe.provider_info import get_provider_info

    info = get_provider_info()
    (integration,) = info["integrations"]
    (hooks,) = info["hooks"]
    (connection_type,) = info["connection-types"]
    assert hooks == {
        "integration-name": integration["integration-name"],
        "python-modules": [CrashsafeHook.__module__],
    }
    assert connection_type["hook-class-name"] == f"{CrashsafeHook.__module__}.{CrashsafeHook.__qualname__}"
    assert connection_type["connection-type"] == CrashsafeHook.conn_type
    assert connection_type["hook-name"] == CrashsafeHook.hook_name


def test_provider_info_imports_nothing_of_airflow(tmp_path: Path) -> None:
    """get_provider_info() stays import-light: neither Airflow nor the hook module is imported."""
    imported = _run_python(
        """
        import json, sys
        from airflow_crashsafe.provider_info import get_provider_info
        get_provider_info()
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "airflow" or ".hooks" in m)))
        """,
        tmp_path / "home",
    )
    assert imported == []


def test_airflow_providers_manager_registers_the_crashsafe_hook(tmp_path: Path) -> None:
    """Airflow's providers managers offer the crashsafe connection type: testable, named, relabelled."""
    loaded = _run_python(
        """
        import json
        from airflow.providers_manager import ProvidersManager
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime
        hook = ProvidersManagerTaskRuntime().hooks["crashsafe"]
        manager = ProvidersManager()
        if hasattr(manager, "iter_connection_type_hook_ui_metadata"):  # Airflow 3.3
            metadata = manager.iter_connection_type_hook_ui_metadata()
            (ui,) = [m for m in metadata if m.connection_type == "crashsafe"]
            ui_name, behaviour = ui.hook_name, ui.field_behaviour or {}
        else:  # the floor release, 3.2
            ui_name, behaviour = hook.hook_name, manager.field_behaviours["crashsafe"]
        print(json.dumps({
            "ui_name": ui_name,
            "class": hook.hook_class_name,
            "name": hook.hook_name,
            "attr": hook.connection_id_attribute_name,
            "testable": hook.connection_testable,
            "package": hook.package_name,
            "relabeling": behaviour.get("relabeling"),
        }))
        """,
        tmp_path / "home",
    )
    assert loaded == {
        "class": "airflow_crashsafe.hooks.crashsafe.CrashsafeHook",
        "name": "Crashsafe store",
        "attr": "crashsafe_conn_id",
        "testable": True,
        "package": DIST,
        "relabeling": {"schema": "Database"},
        "ui_name": "Crashsafe store",
    }


def test_provider_info_version_matches_distribution() -> None:
    """The version in provider info is the installed distribution's version."""
    import airflow_crashsafe
    from airflow_crashsafe.provider_info import get_provider_info

    assert get_provider_info()["versions"] == [metadata.version(DIST)]
    assert airflow_crashsafe.__version__ == metadata.version(DIST)


def test_plugin_is_registered_exactly_once() -> None:
    """Only the entry point registers the plugin: one airflow.plugins entry, no provider-info `plugins`."""
    from airflow_crashsafe.provider_info import get_provider_info

    assert len(_own_entry_points("airflow.plugins")) == 1
    assert "plugins" not in get_provider_info()


def test_airflow_plugins_manager_loads_plugin_once(tmp_path: Path) -> None:
    """Airflow's plugins manager loads `crashsafe` exactly once, from the entry point, without errors."""
    loaded = _run_python(
        """
        import json
        from airflow import plugins_manager
        plugins_manager.ensure_plugins_loaded()
        infos = plugins_manager.get_plugin_info()
        print(json.dumps({
            "names": [info["name"] for info in infos],
            "sources": [str(info["source"]) for info in infos if info["name"] == "crashsafe"],
            "errors": plugins_manager.get_import_errors(),
        }))
        """,
        tmp_path / "home",
    )
    assert loaded["names"].count("crashsafe") == 1
    assert loaded["errors"] == {}
    (source,) = loaded["sources"]
    assert "airflow_crashsafe.plugin:CrashsafePlugin" in source


def test_airflow_reads_crashsafe_config_defaults(tmp_path: Path) -> None:
    """Airflow's providers manager registers the [crashsafe] section with its defaults."""
    loaded = _run_python(
        """
        import json
        from airflow.providers_manager import ProvidersManager
        ProvidersManager().initialize_providers_configuration()
        from airflow.configuration import conf
        print(json.dumps({key: conf.get("crashsafe", key) for key in ("conn_id", "ledger_retention_days")}))
        """,
        tmp_path / "home",
    )
    assert loaded == {"conn_id": "crashsafe_default", "ledger_retention_days": "30"}


def test_public_names_are_exact() -> None:
    """airflow_crashsafe.__all__ is exactly the documented public surface."""
    import airflow_crashsafe

    assert sorted(airflow_crashsafe.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert hasattr(airflow_crashsafe, name), name


@pytest.mark.parametrize("module", ["airflow_crashsafe.plugin", "airflow_crashsafe.operators.sql"])
def test_import_opens_no_database(module: str, tmp_path: Path) -> None:
    """Importing the module loads no PostgreSQL driver and creates no file beyond `import airflow`'s."""
    probe = """
        import json, sys
        import airflow
        {import_line}
        print(json.dumps(sorted(m for m in ("psycopg", "psycopg2") if m in sys.modules)))
    """
    baseline_home, module_home = tmp_path / "baseline", tmp_path / "module"
    _run_python(probe.format(import_line="pass"), baseline_home)
    drivers = _run_python(probe.format(import_line=f"import {module}"), module_home)

    assert drivers == []
    assert _files_under(module_home) == _files_under(baseline_home)
    assert not list(module_home.rglob("*.db"))


@pytest.mark.parametrize(
    ("key", "base"),
    [
        ("operators", "airflow.sdk.BaseOperator"),
        ("sensors", "airflow.sdk.BaseSensorOperator"),
        ("triggers", "airflow.triggers.base.BaseTrigger"),
    ],
)
def test_provider_info_names_modules_that_define_their_kind(key: str, base: str) -> None:
    """Each module provider info lists under operators/sensors/triggers defines at least one of that kind."""
    import importlib
    import inspect

    from airflow_crashsafe.provider_info import INTEGRATION, get_provider_info

    module_name, _, class_name = base.rpartition(".")
    kind = getattr(importlib.import_module(module_name), class_name)
    (entry,) = get_provider_info()[key]
    assert entry["integration-name"] == INTEGRATION
    for name in entry["python-modules"]:
        module = importlib.import_module(name)
        defined = [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == name and issubclass(cls, kind) and not inspect.isabstract(cls)
        ]
        assert defined, f"{name} defines no {class_name}"


def test_secret_options_are_sensitive() -> None:
    """dead_mans_switch_url (the URL is the credential) and any secret-named option are marked sensitive."""
    from airflow_crashsafe.provider_info import get_provider_info

    options = get_provider_info()["config"]["crashsafe"]["options"]
    secret = {n for n in options if re.search(r"secret|password|token|_key$", n)} | {"dead_mans_switch_url"}
    assert {n for n, o in options.items() if o.get("sensitive")} == secret


def test_airflow_masks_and_resolves_the_sensitive_option(tmp_path: Path) -> None:
    """Airflow's configuration knows dead_mans_switch_url as sensitive (masked, _CMD/_SECRET allowed)."""
    sensitive = _run_python(
        """
        import json
        from airflow.configuration import conf
        print(json.dumps(sorted(k for s, k in conf.sensitive_config_values if s == "crashsafe")))
        """,
        tmp_path / "home",
    )
    assert sensitive == ["dead_mans_switch_url"]


@pytest.mark.slow
def test_airflow_cli_runs_the_crashsafe_commands(tmp_path: Path) -> None:
    """`airflow crashsafe` lists every airflow-crashsafe subcommand and runs one, exit code included."""
    from airflow_crashsafe.cli.airflow_commands import subcommands

    airflow = str(Path(sys.executable).with_name("airflow"))
    home = tmp_path / "home"
    home.mkdir()
    store = str(tmp_path / "s.db")
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CRASHSAFE__EMBEDDED_PATH": store}

    def airflow_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [airflow, "crashsafe", *args], env=env, capture_output=True, text=True, timeout=180, check=False
        )

    listed = airflow_cli("--help")
    assert listed.returncode == 0, listed.stderr
    names = [name for name, _ in subcommands()]
    assert {"db", "watch", "ledger", "doctor"} <= set(names)
    for name in names:
        assert re.search(rf"^\s+{name}\b", listed.stdout, re.M), name

    migrated = airflow_cli("db", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert re.search(r"crashsafe store schema version \d+", migrated.stdout)
    refused = airflow_cli("db", "prune", "--older-than", "0")
    assert refused.returncode == 2
    assert "--older-than = 0 is out of range" in refused.stderr
