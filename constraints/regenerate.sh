#!/usr/bin/env bash
# Regenerate the lock constraints/py<major>.<minor>.txt for the Python that runs this script.
#
# It resolves the package's complete tree from scratch: a clean venv in a temp dir,
# `pip install -e '<repo>[dev]' apache-airflow==$AIRFLOW_VERSION` with no constraints of ours, then
# `pip freeze --exclude-editable` (airflow-crashsafe itself is not pinned).
#
#   constraints/regenerate.sh                          # this machine's python3, Airflow 3.3.2
#   PYTHON=python3.12 constraints/regenerate.sh        # the lock for another Python
#   AIRFLOW_VERSION=3.3.3 constraints/regenerate.sh    # move the locked Airflow
#   CRASHSAFE_AIRFLOW=floor constraints/regenerate.sh  # the floor lock: the lowest Airflow pyproject.toml
#                                                      # allows, in constraints/py<ver>-airflow-<floor>.txt
set -euo pipefail

PYTHON="${PYTHON:-python3}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pyver="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
case "${CRASHSAFE_AIRFLOW:-}" in
"")
    AIRFLOW_VERSION="${AIRFLOW_VERSION:-3.3.2}"
    out="$repo/constraints/py$pyver.txt"
    ;;
floor)
    # The floor is the lower bound of apache-airflow in pyproject.toml: one place states it.
    AIRFLOW_VERSION="$(sed -n 's/^ *"apache-airflow>=\([0-9.]*\)".*/\1/p' "$repo/pyproject.toml")"
    [[ -n "$AIRFLOW_VERSION" ]] || { echo "no apache-airflow>=X.Y.Z in pyproject.toml" >&2; exit 1; }
    out="$repo/constraints/py$pyver-airflow-$AIRFLOW_VERSION.txt"
    # Start from the main lock, Airflow's own distributions left out: the floor environment should
    # differ from the main one only where the older Airflow requires it. Resolved from scratch, it
    # takes releases newer than that Airflow ever ran with (cadwyn 9 breaks Airflow 3.2.0's
    # api-server: "TITerminalStatePayload needs a discriminator field").
    prefer="$repo/constraints/py$pyver.txt"
    # Main-lock pins the floor Airflow cannot take (apache-airflow-core 3.2.0 wants aiosqlite<0.22
    # and an older Starlette); when pip reports "conflict is caused by ... depends on X", add X.
    unpin="${FLOOR_UNPIN:-aiosqlite starlette}"
    ;;
*)
    echo "CRASHSAFE_AIRFLOW=${CRASHSAFE_AIRFLOW}: use floor, or leave it unset for the main lock" >&2
    exit 2
    ;;
esac
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$PYTHON" -m venv "$tmp/venv"
prefer_args=()
if [[ -n "${prefer:-}" ]]; then
    grep -v -i -E "^(#|apache-airflow(-core|-task-sdk)?==|(${unpin// /|})==)" "$prefer" >"$tmp/prefer.txt"
    prefer_args=(-c "$tmp/prefer.txt")
fi
"$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check "${prefer_args[@]}" \
    -e "${repo}[dev]" "apache-airflow==$AIRFLOW_VERSION"
"$tmp/venv/bin/python" -m pip check
pip_version="$("$tmp/venv/bin/python" -m pip --version | cut -d' ' -f2)"

{
    echo "# Lock for airflow-crashsafe on Python $pyver with apache-airflow==$AIRFLOW_VERSION."
    echo "# Produced by constraints/regenerate.sh (pip $pip_version, $(date -u +%Y-%m-%d)): a clean venv,"
    echo "# pip install -e '.[dev]' apache-airflow==$AIRFLOW_VERSION, then pip freeze --exclude-editable."
    echo "# Used by ./dev as: pip install -c constraints/$(basename "$out") -e '.[dev]'."
    echo "# Regenerate after changing dependencies in pyproject.toml:" \
        "${CRASHSAFE_AIRFLOW:+CRASHSAFE_AIRFLOW=$CRASHSAFE_AIRFLOW }constraints/regenerate.sh"
    "$tmp/venv/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check \
        | grep -v -i '^airflow-crashsafe[ =@]'
} >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out ($(grep -vc '^#' "$out") pins)"
