#!/usr/bin/env bash
# Start a Dask scheduler and workers on this machine, bound to 127.0.0.1, with the two-word commands
# (distributed >= 2026.6 has no dask-scheduler / dask-worker scripts). The test suite starts exactly
# these command lines (tests/conftest.py: dask_cluster). Stop with Ctrl-C.
#
#   deploy/local-cluster.sh [PORT] [NWORKERS]
#   calengine fit DATA --target class --cluster tcp://127.0.0.1:PORT --output MODEL
#
# The workers start only once *this* scheduler is listening: the scheduler writes its address to a
# scheduler file after binding, and the script waits for that file (or the scheduler's exit). A port
# that is already taken (another scheduler, any other program) is one 'error:' line and exit 1,
# never workers attached to whatever holds the port.
set -euo pipefail
port="${1:-8786}"
nworkers="${2:-2}"
address="tcp://127.0.0.1:${port}"
start_timeout="${CALENGINE_SCHEDULER_START_TIMEOUT:-60}"

state="$(mktemp -d)"
scheduler_file="${state}/scheduler.json"
dask scheduler --host 127.0.0.1 --port "${port}" --no-dashboard --scheduler-file "${scheduler_file}" \
    >"${state}/scheduler.log" 2>&1 &
scheduler=$!
trap 'kill "${scheduler}" "${worker:-}" 2>/dev/null || true; rm -rf "${state}"' EXIT
trap 'exit 130' INT TERM

waited=0
until [ -s "${scheduler_file}" ]; do
    if ! kill -0 "${scheduler}" 2>/dev/null; then
        reason="$(grep -m1 -ioE '(address already in use|[A-Za-z]*Error:[^;]*)' "${state}/scheduler.log" | tr -s ' ' | cut -c1-160 || true)"
        echo "error: the scheduler did not start on ${address} (${reason:-it exited}); is port ${port} taken? choose another PORT" >&2
        exit 1
    fi
    if [ "${waited}" -ge $((start_timeout * 10)) ]; then
        echo "error: the scheduler did not start on ${address} within ${start_timeout} s; see ${state}/scheduler.log" >&2
        trap - EXIT
        kill "${scheduler}" 2>/dev/null || true
        exit 1
    fi
    sleep 0.1
    waited=$((waited + 1))
done
if ! grep -q "\"${address}\"" "${scheduler_file}"; then
    echo "error: the scheduler listens elsewhere than ${address} ($(tr -d '\n' <"${scheduler_file}" | cut -c1-200)); choose another PORT" >&2
    exit 1
fi

dask worker "${address}" --nworkers "${nworkers}" --nthreads 1 --host 127.0.0.1 --no-dashboard --memory-limit 2GiB &
worker=$!
echo "scheduler at ${address}; ${nworkers} worker processes" >&2
wait
