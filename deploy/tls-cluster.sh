#!/usr/bin/env bash
# A TLS-only scheduler and workers on 127.0.0.1. Needs a CA, and a certificate + key for the
# scheduler/workers and for the client (e.g. made with openssl; Security.temporary() in tests).
#
#   deploy/tls-cluster.sh CA.pem CERT.pem KEY.pem [PORT]
#   calengine fit DATA --target class --cluster tls://127.0.0.1:PORT \
#       --tls-ca-file CA.pem --tls-cert CLIENT.pem --tls-key CLIENT.key --output MODEL
set -euo pipefail
ca="$1"; cert="$2"; key="$3"; port="${4:-8786}"
tls=(--tls-ca-file "${ca}" --tls-cert "${cert}" --tls-key "${key}")
dask scheduler --protocol tls --host 127.0.0.1 --port "${port}" --no-dashboard "${tls[@]}" &
scheduler=$!
trap 'kill "${scheduler}" "${worker:-}" 2>/dev/null || true' EXIT INT TERM
sleep 2
dask worker "tls://127.0.0.1:${port}" --nworkers 2 --nthreads 1 --host 127.0.0.1 --no-dashboard "${tls[@]}" &
worker=$!
wait
