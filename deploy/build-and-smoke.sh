#!/usr/bin/env bash
# Build the calengine image and smoke-test it, on a machine with Docker and its compose plugin.
# From the repository root:   deploy/build-and-smoke.sh
# (the image is tagged calengine:0.1.0, the tag deploy/compose.yaml and the Kubernetes files use)
#
# 1. builds deploy/Dockerfile from the lock file;
# 2. runs `calengine --version` and `calengine plugins` in the image;
# 3. starts deploy/compose.yaml's scheduler and two workers, fits naive Bayes + isotonic on the
#    shipped Adult data from the compose client service, scores and evaluates it, checks the row count;
# 4. stops the cluster (also on failure).
set -euo pipefail
cd "$(dirname "$0")/.."
tag="calengine:$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)"
work="$(mktemp -d "${TMPDIR:-/tmp}/calengine-smoke.XXXXXX")"
export CALENGINE_DIR="${work}" CALENGINE_UID="$(id -u)"
compose=(docker compose -f deploy/compose.yaml)
cleanup() { "${compose[@]}" --profile client down --remove-orphans >/dev/null 2>&1 || true; rm -rf "${work}"; }
trap cleanup EXIT

docker build -f deploy/Dockerfile -t "${tag}" .
expected="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)"
got="$(docker run --rm "${tag}" calengine --version)"
[ "${got}" = "${expected}" ] || { echo "error: image has calengine ${got}, pyproject.toml says ${expected}" >&2; exit 1; }
docker run --rm "${tag}" calengine plugins | tee "${work}/plugins.txt"
grep -q "calengine-builtins" "${work}/plugins.txt" && ! grep -q FAILED "${work}/plugins.txt"

mkdir -p "${work}/data"
cp -r data/adult "${work}/data/"
"${compose[@]}" up -d scheduler worker
run() { "${compose[@]}" run --rm -T client "$@"; }
for _ in $(seq 60); do  # the workers need a few seconds to join
  run python -c "from distributed import Client; c = Client('tcp://scheduler:8786', timeout='5s'); c.wait_for_workers(2, timeout=5)" \
    >/dev/null 2>&1 && break
  sleep 2
done
run calengine fit data/adult/train.parquet --target class --positive '>50K' --learner gaussian_nb \
  --method isotonic --cluster tcp://scheduler:8786 --output model --json-log model-run.json
run calengine score model data/adult/test.parquet --cluster tcp://scheduler:8786 --output scores
run calengine evaluate model data/adult/test.parquet --target class --cluster tcp://scheduler:8786
rows="$(run python -c "import pyarrow.parquet as pq; print(pq.read_table('scores').num_rows)")"
[ "${rows}" = "16281" ] || { echo "error: scored ${rows} rows, expected 16281" >&2; exit 1; }
echo "smoke test passed: ${tag} built, fitted, scored ${rows} rows and evaluated on the compose cluster"
