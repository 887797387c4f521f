#!/usr/bin/env bash
# Start a Dask scheduler and workers on this machine, bound to 127.0.0.1, with the two-word commands
# (distributed >= 2026.6 has no dask-scheduler / dask-worker scripts). The test suite starts exactly
# these command lines (tests/conftest.py: dask_cluster). Stop with Ctrl-C.
#
#   deploy/local-cluster.sh [PORT] [NWORKERS]
#   calengine fit DATA --target class --cluster tcp://127.0.0.1:PORT --output MODEL
set -euo pipefail
port="${1:-8786}"
nworkers="${2:-2}"
address="tcp://127.0.0.1:${port}"

dask scheduler --host 127.0.0.1 --port "${port}" --no-dashboard &
scheduler=$!
trap 'kill "${scheduler}" "${worker:-}" 2>/dev/null || true' EXIT INT TERM
sleep 2
dask worker "${address}" --nworkers "${nworkers}" --nthreads 1 --host 127.0.0.1 --no-dashboard --memory-limit 2GiB &
worker=$!
echo "scheduler at ${address}; ${nworkers} worker processes" >&2
wait
