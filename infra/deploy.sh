#!/usr/bin/env bash
# Deploy one stage of Workset to AWS with CloudFormation:
#   infra/deploy.sh dev|prod S3_BUCKET
# S3_BUCKET holds the deployment package (any bucket of the account in the same region).
# Needs AWS credentials and region, the AWS CLI, and the project's venv (./dev test creates it).
#
# This is the route that creates the DynamoDB tables (`chalice deploy` does not). It keeps the
# three names of a stage in step: `chalice package --stage S`, the template parameter Stage=S
# (table and queue names workset-S-*), and the stack name workset-S (the function's log group,
# /aws/lambda/workset-S-APIHandler-..., workset-S-Sweep-... and workset-S-SweepWorker-..., must
# start with workset-S for the role to write to it).
#
# The stack also makes the KMS key of connection secrets and its alias alias/workset-S, which is
# the function's default WORKSET_KMS_KEY_ID; the role may Encrypt/Decrypt only with the key that
# alias names. Tables, key and alias are retained when the stack goes: a new stack of the same
# stage must import them (or they must be removed by hand) before it can be created.
# The sweep's queue workset-S-sweep and its dead-letter queue workset-S-sweep-dlq hold only work
# that the next sweep finds again: they go with the stack. So do the webhook deliveries' queue
# workset-S-webhooks and workset-S-webhooks-dlq: a delivery lost with them is announced again only
# by the agent's next change (the outbox flag is cleared once a delivery is queued). Lambda's event
# sources feed the queues to SweepWorker and WebhookConsumer; Chalice points them at the queues by
# name, so the template must name the queues so (tests/test_infra.py checks it). A queue of such a
# name made outside the stack (by hand, or by the local stack pointed at AWS) must be deleted
# first, and SQS refuses a name for 60 s after a delete: wait that long before making a deleted
# stage's stack again. WebhookConsumer's event source reports partial batch failures
# (FunctionResponseTypes, merged from the template onto Chalice's event source): without it Lambda
# would delete a batch's failed deliveries with the rest.
# DynamoDB adds at most one global secondary index per table per update: a stack made before a
# table gained several indexes (agents: to_review, by_tool, due, outbox) must be brought there one
# index per deploy (edit a copy of the template), or CloudFormation rolls the update back.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: infra/deploy.sh dev|prod S3_BUCKET"
stage=${1:?$usage}
bucket=${2:?$usage}
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-$(aws configure get region)}
out=build/deploy-$stage
infra/build.sh "$stage" "$out"

aws cloudformation package --template-file "$out/sam.json" --s3-bucket "$bucket" \
  --output-template-file "$out/packaged.yaml"
aws cloudformation deploy --template-file "$out/packaged.yaml" --stack-name "workset-$stage" \
  --capabilities CAPABILITY_IAM --parameter-overrides "Stage=$stage"
aws cloudformation describe-stacks --stack-name "workset-$stage" --query "Stacks[0].Outputs" --output table
