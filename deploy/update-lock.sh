#!/usr/bin/env bash
# Refresh deploy/requirements.lock from PyPI: resolve calengine[report] and the bundled plugins into a
# throw-away virtualenv and pin every distribution that lands there (except our own).  The README's
# test command installs with `-c deploy/requirements.lock`, so the suite runs against exactly these
# pins and a release on PyPI cannot turn main red overnight; moving to new upstream versions is this
# deliberate step, followed by the test suite.
#
#   deploy/update-lock.sh            # rewrite the lock in place
#   deploy/update-lock.sh --check    # exit 1 (and show the diff) if PyPI now resolves differently
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[[ "${1:-}" == "--check" ]] && check=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
# importlib_metadata<10: mlflow-skinny (calengine[mlflow], a test dependency) refuses 10, and the test
# environment installs under this lock
"$tmp/venv/bin/pip" install -q --disable-pip-version-check './[report]' ./plugins/builtins ./plugins/lexrank 'importlib_metadata<10'
{
  echo "# Every distribution the image needs at run time -- calengine[report], calengine-builtins and"
  echo "# calengine-lexrank, transitively -- pinned.  The README's test command installs with"
  echo "# '-c deploy/requirements.lock', so these are the versions the test suite runs against"
  echo "# (tests/test_deploy.py fails when the lock misses or over-pins a distribution).  The Dockerfile"
  echo "# installs it with pip --no-deps.  Regenerate with deploy/update-lock.sh."
  echo "# importlib_metadata is held below 10 because mlflow-skinny (calengine[mlflow], a test dependency) needs it."
  "$tmp/venv/bin/pip" list --format=freeze --disable-pip-version-check \
    | grep -viE '^(calengine|calengine-builtins|calengine-lexrank|pip|setuptools|wheel)==' \
    | LC_ALL=C sort -f
} > "$tmp/requirements.lock"
if (( check )); then
  diff -u deploy/requirements.lock "$tmp/requirements.lock" && echo "lock is current"
else
  cp "$tmp/requirements.lock" deploy/requirements.lock
  echo "wrote deploy/requirements.lock ($(grep -vc '^#' deploy/requirements.lock) pins)"
fi
