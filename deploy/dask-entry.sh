#!/bin/sh
# Installed in the image as /usr/local/bin/dask-scheduler and /usr/local/bin/dask-worker.
#
# distributed >= 2026.6 has only the two-word commands (`dask scheduler`, `dask worker`), but the
# official dask/dask Helm chart still starts its pods with `dask-scheduler ARGS` and `dask-worker ARGS`.
# This runs the two-word command with the same arguments.
#
# The chart cannot mount a volume into the scheduler pod, so TLS material may come from environment
# variables instead (filled from a Kubernetes Secret, see deploy/helm/values.yaml): when
# CALENGINE_TLS_CA, CALENGINE_TLS_CERT and CALENGINE_TLS_KEY hold PEM text, they are written to
# private files and passed as --tls-ca-file/--tls-cert/--tls-key.
set -eu
case "$(basename "$0")" in
  dask-scheduler) sub=scheduler ;;
  dask-worker) sub=worker ;;
  *) echo "error: install this script as dask-scheduler or dask-worker, not $(basename "$0")" >&2; exit 2 ;;
esac
if [ -n "${CALENGINE_TLS_CA:-}${CALENGINE_TLS_CERT:-}${CALENGINE_TLS_KEY:-}" ]; then
  if [ -z "${CALENGINE_TLS_CA:-}" ] || [ -z "${CALENGINE_TLS_CERT:-}" ] || [ -z "${CALENGINE_TLS_KEY:-}" ]; then
    echo "error: TLS needs all of CALENGINE_TLS_CA, CALENGINE_TLS_CERT and CALENGINE_TLS_KEY" >&2
    exit 2
  fi
  dir="$(mktemp -d)"
  umask 077
  printf '%s\n' "${CALENGINE_TLS_CA}" > "${dir}/ca.pem"
  printf '%s\n' "${CALENGINE_TLS_CERT}" > "${dir}/cert.pem"
  printf '%s\n' "${CALENGINE_TLS_KEY}" > "${dir}/key.pem"
  exec dask "${sub}" "$@" --tls-ca-file "${dir}/ca.pem" --tls-cert "${dir}/cert.pem" --tls-key "${dir}/key.pem"
fi
exec dask "${sub}" "$@"
