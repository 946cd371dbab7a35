#!/usr/bin/env bash
# Build one stage's deployment package and SAM template exactly as infra/deploy.sh ships them:
#   infra/build.sh dev|prod OUT_DIR
# Packages installed without their declared dependencies (requirements-nodeps.txt) go into
# vendor/, which chalice copies into the deployment package as they are. Needs the project's venv
# (./dev test creates it) and the package index; no AWS credentials.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: infra/build.sh dev|prod OUT_DIR"
stage=${1:?$usage}
out=${2:?$usage}
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}
rm -rf "$out"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
rm -rf vendor
.venv/bin/python -m pip install --quiet --no-deps --target vendor -r requirements-nodeps.txt
.venv/bin/chalice package --merge-template infra/resources.json --stage "$stage" "$out" 2>&1 | tee "$log"
if grep -q "Could not install dependencies" "$log"; then
  echo "refusing to deploy: the package lacks dependencies the Lambda runtime needs (see above)" >&2
  exit 1
fi
