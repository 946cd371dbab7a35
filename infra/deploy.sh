#!/usr/bin/env bash
# Deploy one stage of Workset to AWS with CloudFormation:
#   infra/deploy.sh dev|prod S3_BUCKET
# S3_BUCKET holds the deployment package (any bucket of the account in the same region).
# Needs AWS credentials and region, the AWS CLI, and the project's venv (./dev test creates it).
#
# This is the route that creates the DynamoDB tables (`chalice deploy` does not). It keeps the
# three names of a stage in step: `chalice package --stage S`, the template parameter Stage=S
# (table names workset-S-*), and the stack name workset-S (the function's log group,
# /aws/lambda/workset-S-APIHandler-..., must start with workset-S for the role to write to it).
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: infra/deploy.sh dev|prod S3_BUCKET"
stage=${1:?$usage}
bucket=${2:?$usage}
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-$(aws configure get region)}
out=build/deploy-$stage
rm -rf "$out"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
.venv/bin/chalice package --merge-template infra/resources.json --stage "$stage" "$out" 2>&1 | tee "$log"
if grep -q "Could not install dependencies" "$log"; then
  echo "refusing to deploy: the package lacks dependencies the Lambda runtime needs (see above)" >&2
  exit 1
fi

aws cloudformation package --template-file "$out/sam.json" --s3-bucket "$bucket" \
  --output-template-file "$out/packaged.yaml"
aws cloudformation deploy --template-file "$out/packaged.yaml" --stack-name "workset-$stage" \
  --capabilities CAPABILITY_IAM --parameter-overrides "Stage=$stage"
aws cloudformation describe-stacks --stack-name "workset-$stage" --query "Stacks[0].Outputs" --output table
