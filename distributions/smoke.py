"""Install the built wheel into a fresh venv of each supported Airflow and use it as a user would.

    .venv/bin/python distributions/smoke.py [--wheel WHEEL] [--airflow VERSION ...] [--keep]

Each supported Airflow is a lock in ``constraints/`` for this Python (``py3.11.txt``: 3.3.2, the
floor's ``py3.11-airflow-3.2.0.txt``). For each, concurrently, in a temporary directory: a new venv,
``pip install <wheel> -c <lock>`` (the package's runtime dependencies only, no extras), then in a
new ``AIRFLOW_HOME`` whose ``airflow.cfg`` sets two ``[crashsafe]`` options:

  install          the venv's Airflow is the lock's, ``pip check`` is clean
  providers        ``airflow providers list`` shows airflow-crashsafe with the wheel's version
  plugins          ``airflow plugins`` shows the crashsafe plugin from its entry point, with its listener
  config           ``airflow config get-value crashsafe ledger_retention_days`` is airflow.cfg's value
  db migrate       ``airflow db migrate`` (SQLite metadata database)
  store migrate    ``airflow-crashsafe db migrate`` creates the store where airflow.cfg's
                   ``[crashsafe] embedded_path`` says: the package's own reader honours airflow.cfg
  fenced write +   ``dag.test()`` of ``distributions/smoke_dag.py``: a fenced PartitionOverwriteOperator
  ledgered call    write on a throwaway PostgreSQL and an IdempotentHttpOperator call to a local vendor,
                   each failing once after its work committed; the retries skip the committed write
                   and replay the recorded answer without a second request
  airflow crashsafe  ``airflow crashsafe ledger show --dag crashsafe_smoke`` (the provider's CLI
                   inside Airflow's) shows that call as succeeded

It prints each step as it passes and a table at the end. Exit 0 when every step passed on every
Airflow; 1 otherwise, naming for each failure the Airflow, the step and why, after the output of the
command that failed (the other Airflow's steps still run).
The wheel is built from this checkout (``pip wheel --no-deps``; without build isolation when hatchling
is installed, as in ``.venv``) unless ``--wheel`` names one. CI runs it after the tests
(``.ci/run``); docs/packaging.md has the timings.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DAG_FILE = Path(__file__).with_name("smoke_dag.py")
RETENTION_DAYS = "17"  # [crashsafe] ledger_retention_days in airflow.cfg; the default is 30
TAIL = 3000
DIST = "airflow-crashsafe"


class StepFailed(Exception):
    """A step's check failed; ``output`` is what the command printed."""

    def __init__(self, step: str, why: str, output: str = "") -> None:
        super().__init__(why)
        self.step, self.why, self.output = step, why, output


@dataclass
class Smoke:
    """One Airflow's fresh venv and AIRFLOW_HOME, and what each step found."""

    airflow: str
    lock: Path
    wheel: Path
    root: Path
    done: list[tuple[str, float, float, str]] = field(default_factory=list)  # step, wall s, CPU s, what
    cpu: float = 0.0

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def store(self) -> Path:
        return self.home / "crashsafe-smoke-store.db"

    def env(self) -> dict[str, str]:
        """A user's shell with this venv activated: nothing of the checkout's or CI's Airflow settings."""
        keep = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AIRFLOW") and k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
        }
        path = f"{self.venv / 'bin'}{os.pathsep}{keep.get('PATH', '')}"
        return {**keep, "AIRFLOW_HOME": str(self.home), "PATH": path}

    def run(self, step: str, *argv: str | Path, timeout: float = 300) -> str:
        """Run a command of the venv in a scratch directory; its stdout, or StepFailed with its output.

        The command's CPU time (its own and its waited-for children's, from wait4) adds to ``cpu``:
        on a busy machine wall time says little, CPU time what the step costs.
        """
        command = [str(a) for a in argv]
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            process = subprocess.Popen(command, cwd=self.root, env=self.env(), stdout=out, stderr=err)
            expired = threading.Event()
            timer = threading.Timer(timeout, lambda: (expired.set(), process.kill()))
            timer.start()
            try:
                _, status, usage = os.wait4(process.pid, 0)
            finally:
                timer.cancel()
            process.returncode = os.waitstatus_to_exitcode(status)
            self.cpu += usage.ru_utime + usage.ru_stime
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        said = f"`{' '.join(command)}`"
        if expired.is_set():
            raise StepFailed(
                step, f"{said} did not finish in {timeout:.0f} s", stdout[-TAIL:] + stderr[-TAIL:]
            )
        if process.returncode != 0:
            raise StepFailed(step, f"{said} exited {process.returncode}", stdout[-TAIL:] + stderr[-TAIL:])
        return stdout

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name

    def step(self, name: str, check: Callable[[], str]) -> None:
        started, cpu = time.monotonic(), self.cpu
        try:
            detail = check()
        except StepFailed:
            raise
        except Exception as exc:  # a check that could not even read the output is a failed step too
            raise StepFailed(name, f"{type(exc).__name__}: {exc}") from exc
        seconds, cpu = time.monotonic() - started, self.cpu - cpu
        self.done.append((name, seconds, cpu, detail))
        took = f"{seconds:.1f} s, CPU {cpu:.1f} s"
        print(f"smoke {self.airflow}: {name} ok ({took}): {detail}", file=sys.stderr, flush=True)


def _json_in(step: str, stdout: str) -> object:
    """The JSON document a command printed, from its first line that opens one (Airflow may log before it)."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith(("[", "{"))), None)
    try:
        return json.loads("\n".join(lines[start:])) if start is not None else None
    except ValueError as exc:
        raise StepFailed(step, f"no JSON in the output ({exc})", stdout[-TAIL:]) from exc


def _expect(ok: bool, step: str, why: str, output: str = "") -> None:
    if not ok:
        raise StepFailed(step, why, output[-TAIL:])


def wheel_version(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        meta = archive.read(name).decode()
    match = re.search(r"^Version: (\S+)$", meta, re.M)
    assert match, f"{wheel} has no Version in its METADATA"
    return match.group(1)


def smoke(s: Smoke) -> Smoke:
    """Every step on one Airflow, in order; raises StepFailed at the first that fails."""
    version = wheel_version(s.wheel)
    s.home.mkdir(parents=True)
    (s.home / "dags").mkdir()
    (s.home / "airflow.cfg").write_text(
        "[core]\nload_examples = False\n\n"
        f"[crashsafe]\nledger_retention_days = {RETENTION_DAYS}\nembedded_path = {s.store}\n"
    )

    def install() -> str:
        s.run("install", sys.executable, "-m", "venv", s.venv, timeout=120)
        # --no-compile: Python compiles what it imports anyway; compiling all of Airflow up front
        # would only add time.
        pip = (s.bin("python"), "-m", "pip", "--disable-pip-version-check")
        s.run("install", *pip, "install", "-q", "--no-compile", "-c", s.lock, s.wheel, timeout=900)
        s.run("install", *pip, "check", timeout=120)
        probe = f"import importlib.metadata as m; print(*map(m.version, ['apache-airflow', {DIST!r}]))"
        found, wanted = s.run("install", s.bin("python"), "-c", probe).split(), [s.airflow, version]
        _expect(found == wanted, "install", f"installed {found}, expected {wanted}")
        return f"apache-airflow {s.airflow} + airflow-crashsafe {version} from the lock; pip check clean"

    def providers() -> str:
        out = s.run("providers", s.bin("airflow"), "providers", "list", "-o", "json")
        found = _json_in("providers", out)
        listed = {p["package_name"]: p["version"] for p in found} if isinstance(found, list) else {}
        _expect(
            listed.get("airflow-crashsafe") == version,
            "providers",
            f"airflow-crashsafe {version} is not listed",
            out,
        )
        return f"airflow-crashsafe {version} among {len(listed)} providers"

    def plugins() -> str:
        out = s.run("plugins", s.bin("airflow"), "plugins", "-o", "json")
        found = _json_in("plugins", out)
        ours = next((p for p in found if p["name"] == "crashsafe"), None) if isinstance(found, list) else None
        _expect(ours is not None, "plugins", "no plugin named crashsafe is loaded", out)
        assert ours is not None
        _expect(
            "airflow_crashsafe.plugin:CrashsafePlugin" in ours["source"],
            "plugins",
            f"crashsafe comes from {ours['source']}, not the entry point",
        )
        listener = "airflow_crashsafe.audit.listener"
        _expect(listener in ours["listeners"], "plugins", f"{listener} is not among its listeners")
        return "crashsafe from its entry point, with the audit listener"

    def config() -> str:
        got = s.run("config", s.bin("airflow"), "config", "get-value", "crashsafe", "ledger_retention_days")
        why = f"got {got.strip()!r}, airflow.cfg says {RETENTION_DAYS}"
        _expect(got.strip() == RETENTION_DAYS, "config", why)
        return f"[crashsafe] ledger_retention_days = {RETENTION_DAYS} from airflow.cfg"

    def db_migrate() -> str:
        s.run("db migrate", s.bin("airflow"), "db", "migrate", timeout=600)
        return "SQLite metadata database created"

    def store_migrate() -> str:
        out = s.run("store migrate", s.bin("airflow-crashsafe"), "db", "migrate")
        schema = re.search(r"crashsafe store schema version (\d+)", out)
        _expect(schema is not None, "store migrate", "no `crashsafe store schema version N` line", out)
        assert schema is not None
        _expect(s.store.is_file(), "store migrate", f"no store at airflow.cfg's embedded_path {s.store}", out)
        return f"schema version {schema.group(1)} at airflow.cfg's [crashsafe] embedded_path"

    call: dict[str, object] = {}

    def dag_run() -> str:
        dag = s.home / "dags" / "crashsafe_smoke.py"
        shutil.copyfile(DAG_FILE, dag)
        try:
            out = s.run("fenced write + ledgered call", s.bin("python"), dag, timeout=600)
        except StepFailed as failed:  # the DAG's runner says which check failed, last
            said = [line for line in failed.output.splitlines() if line.startswith("smoke: ")]
            failed.why += f": {said[-1].removeprefix('smoke: ')}" if said else ""
            raise
        summary = _json_in("fenced write + ledgered call", out.strip().splitlines()[-1])
        assert isinstance(summary, dict)
        call.update(summary["call"])
        return (
            f"write: try 1 wrote {summary['write']['try1']['rows']} rows, try 2 skipped it "
            f"({summary['write']['insert_statements']} INSERT); call: {call['requests']} request, "
            "try 2 replayed it"
        )

    def airflow_cli() -> str:
        step = "airflow crashsafe"
        out = s.run(
            step, s.bin("airflow"), "crashsafe", "ledger", "show", "--dag", "crashsafe_smoke", "--json"
        )
        entries = _json_in(step, out)
        assert isinstance(entries, list)
        (entry,) = [e for e in entries if e["idem_key"] == call["key"]] or [None]
        _expect(entry is not None, step, f"the ledger has no entry for the call's key {call['key']}", out)
        assert entry is not None
        counts = {k: entry[k] for k in ("state", "send_count", "replay_count")}
        wanted = {"state": "succeeded", "send_count": 1, "replay_count": 1}
        _expect(counts == wanted, step, f"the ledger says {counts}, expected {wanted}", out)
        return "ledger show --dag: the call succeeded, sent once, replayed once"

    for name, check in (
        ("install", install),
        ("providers", providers),
        ("plugins", plugins),
        ("config", config),
        ("db migrate", db_migrate),
        ("store migrate", store_migrate),
        ("fenced write + ledgered call", dag_run),
        ("airflow crashsafe", airflow_cli),
    ):
        s.step(name, check)
    return s


def locks() -> dict[str, Path]:
    """Airflow version -> its lock, for every lock of this Python in constraints/."""
    found = {}
    for lock in sorted((ROOT / "constraints").glob(f"py{sys.version_info[0]}.{sys.version_info[1]}*.txt")):
        pin = re.search(r"^apache-airflow==(\S+)$", lock.read_text(), re.M)
        if pin:
            found[pin.group(1)] = lock
    return dict(sorted(found.items(), key=lambda item: [int(p) for p in re.findall(r"\d+", item[0])]))


def build_wheel(out: Path) -> Path:
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)]
    if find_spec("hatchling"):  # .venv has it (the dev extra): build offline, as the tests do
        argv.append("--no-build-isolation")
    built = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if built.returncode != 0:
        raise StepFailed("build", f"`{' '.join(argv)}` exited {built.returncode}", built.stderr[-TAIL:])
    (wheel,) = out.glob("airflow_crashsafe-*.whl")
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--wheel", type=Path, help="smoke-test this wheel instead of building one")
    parser.add_argument(
        "--airflow", action="append", metavar="VERSION", help="only this Airflow (repeatable); default: all"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary venvs and homes; print where")
    args = parser.parse_args(argv)
    available = locks()
    wanted = args.airflow or list(available)
    unknown = [v for v in wanted if v not in available]
    if unknown:
        locked = ", ".join(available)
        parser.error(f"no lock for Airflow {', '.join(unknown)} in constraints/ (locked: {locked})")
    if args.wheel and not args.wheel.is_file():
        parser.error(f"--wheel {args.wheel}: no such file")

    scratch = Path(tempfile.mkdtemp(prefix="crashsafe-smoke-"))
    started = time.monotonic()
    runs: list[Smoke] = []
    failed: list[tuple[Smoke | None, BaseException]] = []
    try:
        wheel = args.wheel.resolve() if args.wheel else build_wheel(scratch / "wheel")
        print(f"smoke: {wheel.name} on Airflow {', '.join(wanted)} in {scratch}", file=sys.stderr, flush=True)
        runs = [Smoke(v, available[v], wheel, scratch / f"airflow-{v}") for v in wanted]
        with ThreadPoolExecutor(max_workers=len(runs)) as pool:
            futures = [(r, pool.submit(smoke, r)) for r in runs]
            failed = [(r, error) for r, f in futures if (error := f.exception()) is not None]
    except StepFailed as exc:
        failed = [(None, exc)]
    finally:
        if args.keep:
            print(f"smoke: kept {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    report(runs, failed, time.monotonic() - started)
    return 1 if failed else 0


def report(runs: list[Smoke], failed: list[tuple[Smoke | None, BaseException]], seconds: float) -> None:
    """What each step checked and cost, each failure with its command's output, and a closing count."""
    print(f"smoke: {seconds:.0f} s in all")
    print(f"  {'Airflow':<8} {'step':<29} {'wall s':>7} {'CPU s':>6}  checked")
    for run in runs:
        for name, wall, cpu, detail in run.done:
            print(f"  {run.airflow:<8} {name:<29} {wall:7.1f} {cpu:6.1f}  {detail}")
        print(f"  {run.airflow:<8} {'(all steps)':<29} {sum(d[1] for d in run.done):7.1f} {run.cpu:6.1f}")
    sys.stdout.flush()
    for run, error in failed:
        where = f"Airflow {run.airflow}" if run else "the wheel"
        if isinstance(error, StepFailed):
            print(error.output.rstrip(), file=sys.stderr)
            print(f"smoke: FAILED on {where}, step '{error.step}': {error.why}", file=sys.stderr)
        else:
            print(f"smoke: FAILED on {where}: {type(error).__name__}: {error}", file=sys.stderr)
    sys.stderr.flush()
    # Steps passed on each Airflow; alone on its line, the closing count CI's log is read for.
    print(f"smoke: {sum(len(r.done) for r in runs)} passed, {len(failed)} failed")


if __name__ == "__main__":
    sys.exit(main())
