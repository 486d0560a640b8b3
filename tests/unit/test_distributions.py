"""What users download: the wheel's metadata, the slim watchdog distribution, the sdist, the README.

Like the wheel check in test_layout.py, these build the real artifacts (offline, no build
isolation) and install them into fresh venvs; see docs/packaging.md.
"""

from __future__ import annotations

import ast
import email
import email.message
import importlib.util
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import tomllib

from airflow_crashsafe.testing.http import serve

ROOT = Path(__file__).resolve().parents[2]
WATCHDOG_DIST = ROOT / "distributions" / "watchdog"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
ENV = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}


def _run(*argv: str | Path, cwd: Path = ROOT, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout, check=False
    )


def _build_wheel(project: Path, out: Path) -> Path:
    build = _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, project
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


def _wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0].lower()


def _import_closure(starts: list[str]) -> set[str]:
    """Every airflow_crashsafe module the given modules import, at top level or inside functions."""
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        module = todo.pop()
        base = ROOT.joinpath(*module.split("."))
        path = base / "__init__.py" if (base / "__init__.py").exists() else base.with_suffix(".py")
        if module in seen or not path.exists():
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                name = node.module or ""
                if node.level:
                    keep = len(parts) - node.level + (1 if path.name == "__init__.py" else 0)
                    name = ".".join([*parts[:keep], *([node.module] if node.module else [])])
                todo += [name, *(f"{name}.{alias.name}" for alias in node.names)]
    return {m for m in seen if m.split(".")[0] == "airflow_crashsafe"}


def _bare_venv(where: Path) -> Path:
    """A venv without pip that sees none of the shared environment; its python."""
    venv = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)], timeout=60, check=False
    )
    assert venv.returncode == 0
    return where / "bin" / "python"


def _purelib(python: Path) -> Path:
    probe = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    assert probe.returncode == 0, probe.stderr
    return Path(probe.stdout.strip())


def test_wheel_metadata_is_complete(tmp_path: Path) -> None:
    """The wheel carries LICENSE and NOTICE, project URLs, a status classifier and bounded dependencies."""
    wheel = _build_wheel(ROOT, tmp_path)
    meta = _wheel_metadata(wheel)
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.rsplit("/", 1)[-1] for n in names if "/licenses/" in n} == {"LICENSE", "NOTICE"}
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert meta["License-Expression"] == "Apache-2.0"
    urls = dict(value.split(", ", 1) for value in meta.get_all("Project-URL", []))
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())
    assert any(c.startswith("Development Status :: ") for c in meta.get_all("Classifier", []))

    requires = meta.get_all("Requires-Dist", [])
    core = {_requirement_name(r): r for r in requires if "extra ==" not in r}
    # Every module the package imports from a third party at run time is declared.
    for name in ("psycopg", "requests", "sqlglot", "apache-airflow-providers-common-sql"):
        assert name in core, name
    assert re.search(r"tomli.*python_version < .3\.11.", core["tomli"]), core["tomli"]
    unbounded = [r for n, r in core.items() if n.startswith("apache-airflow") and ">=" not in r]
    assert not unbounded, f"give these a lower bound: {unbounded}"


def test_readme_images_are_absolute_links_to_the_release_tag() -> None:
    """README images point at the Source repository's raw files for tag v<version>, which exist here."""
    readme = (ROOT / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)", readme) + re.findall(r"<img [^>]*src=\"([^\"]+)\"", readme)
    assert images, "no images found: the check would pass vacuously"
    owner_repo = PROJECT["urls"]["Source"].removeprefix("https://github.com/")
    prefix = f"https://raw.githubusercontent.com/{owner_repo}/v{PROJECT['version']}/"
    for url in images:
        assert url.startswith(prefix), f"{url}: use {prefix}<path> (relative links break on the index)"
        assert (ROOT / url.removeprefix(prefix)).is_file(), url


def test_watchdog_distribution_tracks_the_package() -> None:
    """airflow-crashsafe-watchdog has the package's version and ships every module the watchdog imports."""
    config = tomllib.loads((WATCHDOG_DIST / "pyproject.toml").read_text())
    assert config["project"]["version"] == PROJECT["version"]
    assert config["project"]["urls"]["Source"] == PROJECT["urls"]["Source"]
    shipped = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"].values()
    watchdog = sorted(ROOT.glob("airflow_crashsafe/watchdog/*.py"))
    needed = _import_closure([".".join(p.relative_to(ROOT).with_suffix("").parts) for p in watchdog])
    assert "airflow_crashsafe.store.dbapi" in needed  # the closure follows imports inside functions
    missing = [
        module
        for module in sorted(needed)
        if not any(
            f"{module.replace('.', '/')}{suffix}".startswith(entry.removesuffix(".py"))
            for entry in shipped
            for suffix in ("", ".py", "/__init__.py")
        )
    ]
    assert not missing, f"add to distributions/watchdog/pyproject.toml's force-include: {missing}"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_watchdog_wheel_pages_without_airflow(tmp_path: Path) -> None:
    """The watchdog wheel, in a venv with only it and requests, pages a webhook when the API is down."""
    wheel = _build_wheel(WATCHDOG_DIST, tmp_path / "wheels")
    requires = _wheel_metadata(wheel).get_all("Requires-Dist", [])
    core = sorted(_requirement_name(r) for r in requires if "extra ==" not in r)
    assert core == ["requests", "tomli"], core

    python = _bare_venv(tmp_path / "venv")
    install = _run(
        sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-compile", "-q", wheel
    )
    assert install.returncode == 0, install.stderr
    # requests and what it requires, taken from the shared environment without anything else of it.
    deps = tmp_path / "deps"
    deps.mkdir()
    shared = Path(sysconfig.get_paths()["purelib"])
    for dist in (
        "requests",
        *(_requirement_name(r) for r in metadata.requires("requests") or [] if "extra" not in r),
    ):
        for top in (metadata.distribution(dist).read_text("top_level.txt") or dist.replace("-", "_")).split():
            (deps / top).symlink_to(shared / top)
    (_purelib(python) / "requests-tree.pth").write_text(f"{deps}\n")
    assert _run(python, "-c", "import airflow").returncode != 0, "Airflow is importable in the slim venv"

    config = tmp_path / "watch.toml"
    with serve() as hook:
        config.write_text(
            f'[watch]\napi_url = "http://127.0.0.1:9"\nstate_dir = "{tmp_path / "state"}"\n\n'
            f'[[sinks]]\ntype = "webhook"\nurl = "{hook.url}/page"\n'
        )
        watch = _run(
            tmp_path / "venv" / "bin" / "airflow-crashsafe-watchdog",
            "--config",
            config,
            "--grace",
            "0",
            "--once",
            cwd=tmp_path,
            timeout=60,
        )
    assert watch.returncode == 1, watch.stderr
    assert "api_unreachable" in watch.stderr
    pages = [r for r in hook.requests if r.method == "POST"]
    assert len(pages) == 1, watch.stderr
    assert pages[0].path == "/page"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sdist_runs_its_own_tests(tmp_path: Path) -> None:
    """The sdist holds the tests and what they read; unpacked, its layout and deployment tests pass."""
    build = _run(
        sys.executable, "-c", f"import hatchling.build as b; print(b.build_sdist({str(tmp_path)!r}))"
    )
    assert build.returncode == 0, build.stderr
    with tarfile.open(tmp_path / build.stdout.strip().splitlines()[-1]) as sdist:
        sdist.extractall(tmp_path / "unpacked", filter="data")
    (tree,) = (tmp_path / "unpacked").iterdir()
    for needed in ("LICENSE", "NOTICE", "tests/conftest.py", "tests/data/compose-spec.json", "drill/cli.py"):
        assert (tree / needed).is_file(), needed
    assert not list(tree.rglob("__pycache__"))
    tests = _run(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/unit/test_deployment.py",
        "tests/unit/test_layout.py",
        "-k",
        "not wheel",
        cwd=tree,
        timeout=240,
    )
    assert tests.returncode == 0, tests.stdout[-3000:]
    assert " passed" in tests.stdout


def test_floor_lock_pins_the_declared_floor_and_every_dependency() -> None:
    """The floor lock exists for pyproject's apache-airflow>=X, pins X and every direct dependency."""
    (floor,) = [
        r.split(">=", 1)[1] for r in PROJECT["dependencies"] if _requirement_name(r) == "apache-airflow"
    ]
    lines = (ROOT / "constraints" / f"py3.11-airflow-{floor}.txt").read_text().splitlines()
    floor_lock = dict(line.split("==", 1) for line in lines if "==" in line and not line.startswith("#"))
    assert floor_lock["apache-airflow"] == floor
    direct = {
        _requirement_name(r)
        for r in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["test"]]
        if "python_version < '3.11'" not in r and not r.startswith("airflow-crashsafe")
    }
    pinned = {name.lower() for name in floor_lock}
    assert direct <= pinned, f"regenerate the floor lock: {sorted(direct - pinned)}"
    assert "CRASHSAFE_AIRFLOW=floor" in (ROOT / ".ci" / "run").read_text()


def _smoke_module() -> Any:
    """distributions/smoke.py, a script (not a package module), loaded by path."""
    path = ROOT / "distributions" / "smoke.py"
    spec = importlib.util.spec_from_file_location("crashsafe_install_smoke", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_install_smoke_covers_every_supported_airflow_in_ci() -> None:
    """distributions/smoke.py finds the floor's lock and the main lock, and .ci/run runs it."""
    (floor,) = [
        r.split(">=", 1)[1] for r in PROJECT["dependencies"] if _requirement_name(r) == "apache-airflow"
    ]
    locks = _smoke_module().locks()
    assert next(iter(locks)) == floor
    assert locks[floor].name == f"py3.11-airflow-{floor}.txt"
    assert "py3.11.txt" in {lock.name for lock in locks.values()}
    assert len(locks) >= 2
    assert re.search(r"^\.venv/bin/python distributions/smoke\.py", (ROOT / ".ci" / "run").read_text(), re.M)


def test_install_smoke_refuses_an_airflow_without_a_lock(capsys: pytest.CaptureFixture[str]) -> None:
    """Asked for an Airflow no lock pins, the smoke test exits 2 naming the locked ones."""
    with pytest.raises(SystemExit) as exited:
        _smoke_module().main(["--airflow", "9.9.9"])
    assert exited.value.code == 2
    assert "no lock for Airflow 9.9.9 in constraints/ (locked: 3.2.0, 3.3.2)" in capsys.readouterr().err
