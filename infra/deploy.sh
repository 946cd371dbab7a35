#!/usr/bin/env bash
# Deploy one stage of Workset to AWS with CloudFormation:
#   infra/deploy.sh dev|prod S3_BUCKET
# S3_BUCKET holds the deployment package (any bucket of the account in the same region).
# Needs AWS credentials and region, the AWS CLI, and the project's venv (./dev test creates it).
#
# This is the route that creates the DynamoDB tables (`chalice deploy` does not). It keeps the
# three names of a stage in step: `chalice package --stage S`, the template parameter Stage=S
# (table names workset-S-*), and the stack name workset-S (the function's log group,
# /aws/lambda/workset-S-APIHandler-... and workset-S-Sweep-..., must start with workset-S for the
# role to write to it).
#
# The stack also makes the KMS key of connection secrets and its alias alias/workset-S, which is
# the function's default WORKSET_KMS_KEY_ID; the role may Encrypt/Decrypt only with the key that
# alias names. Tables, key and alias are retained when the stack goes: a new stack of the same
# stage must import them (or they must be removed by hand) before it can be created.
# DynamoDB adds at most one global secondary index per table per update: a stack made before a
# table gained several indexes (agents: to_review, by_tool, due) must be brought there one index
# per deploy (edit a copy of the template), or CloudFormation rolls the update back.
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
