#!/usr/bin/env bash
# Deploy one stage of Workset to AWS with CloudFormation:
#   infra/deploy.sh [--preview] STAGE S3_BUCKET [--tag Key=Value ...] [Parameter=value ...]
#   infra/deploy.sh --rollback STAGE S3_BUCKET
#   infra/deploy.sh --rollback-alias STAGE
# STAGE is any name of lower-case letters, digits and dashes starting with a letter (at most 21):
# the stack is workset-STAGE, its tables, queues and key alias workset-STAGE-*.
# S3_BUCKET holds the deployment package (any bucket of the account in the same region).
# Needs AWS credentials and region, the AWS CLI, and the project's venv (./dev up creates it).
# Before building (3 minutes), it checks the CLI, the credentials, the bucket and, with access
# logs on, the region's API Gateway CloudWatch role; any missing stops it with what to do.
#
# --preview  builds and uploads, then makes a CloudFormation change set and prints what it would
#            add, modify (and whether it replaces) or remove, without executing it. Execute it
#            with the command printed, or delete it (`aws cloudformation delete-change-set`).
# --tag Key=Value  (repeatable) a stack tag: CloudFormation puts them on every resource it makes (for
#            accounts whose policies require tags); each resource also carries workset:stage and
#            cost-center (the CostCenter parameter).
# --rollback returns the stack to the release deployed before the current one, in one step, with
#            no build: each deploy of a new template keeps it (not a deploy that changed nothing,
#            nor one that changed only parameters or tags) at
#            s3://S3_BUCKET/workset-STAGE/releases/<UTC time>.yaml (the code it names stays in the
#            bucket: `aws cloudformation package` stores it by content hash), and the rollback
#            deploys the previous one with the stack's current parameters. Tables are never rolled
#            back (they keep their data); a release whose template lacks an index the data needs
#            is the one case to think about first.
# --rollback-alias  faster, code only: each function publishes a version per deploy behind the
#            alias `live` (the API and the event sources invoke the alias); this points every
#            alias back at the version before, in seconds. The stack still names the newer
#            versions: the next deploy, or --rollback, settles it.
#
# Template parameters (infra/resources.json; each optional, and an update keeps a parameter's
# previous value unless it is given again; `Name=` clears one):
#   PublicDomain=workset.example.com  a custom domain serving the API at its root (the domain,
#                        its certificate and a base path mapping of (none) to the stage `api` are
#                        made outside the stack). Without it the public URL is the API's own
#                        https://<api id>.execute-api.<region>.amazonaws.com/api.
#   AlarmTopicArn=arn:aws:sns:...     an existing SNS topic for the alarms; without it the stack
#                        makes workset-<stage>-alarms.
#   AlarmEmail=ops@example.com        subscribes an address to the topic the stack makes (AWS
#                        mails a confirmation link first).
#   LogRetentionInDays=30             how long the functions' log groups keep events (30).
#   ApiThrottleRateLimit=50           requests per second each method of the API's stage serves,
#                        whoever calls (API Gateway's default method throttling: one token bucket
#                        per route and method; past it, 429 without invoking the function). All
#                        agents' MCP traffic shares POST /mcp. Bounds what a stranger's flood costs.
#   ApiThrottleBurstLimit=100         requests each method serves at once above that rate.
#   WebAclArn=arn:aws:wafv2:...       an existing REGIONAL AWS WAF web ACL to associate with the
#                        API's stage (per-address rate rules, IP reputation); none by default.
# Stage is set from the first argument.
#
# The console signs sessions with the SecureString parameter /workset/<stage>/console-secret.
# CloudFormation cannot make SecureStrings, so this script makes it (48 random bytes) when it is
# absent, and never changes one that exists. The function reads it once per cold start. To rotate
# it: `aws ssm put-parameter --name /workset/<stage>/console-secret --type SecureString
# --overwrite --value ...`, then deploy again (new instances read the new one; every console
# session ends). The stack writes the public URL to the String parameter /workset/<stage>/public-url
# (the function cannot get it from its environment: the API refers to the function, so the
# function cannot refer to the API); a parameter of that name made by hand must be deleted first.
#
# The stack makes each function's log group (/aws/lambda/<function name>, kept LogRetentionInDays
# days; retained when the stack goes), and the functions' role may no longer make log groups. A
# stack deployed before this did not own them: Lambda made them on first use, and CloudFormation
# cannot make one that exists. This script stops with the commands to delete them (their events
# go with them; export what you need first), then run it again.
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
# name, so the template must name the queues so (tests/test_infra_queues.py checks it). A queue
# of such a name made outside the stack (by hand, or by the local stack pointed at AWS) must be
# deleted first, and SQS refuses a name for 60 s after a delete: wait that long before making a
# deleted stage's stack again. WebhookConsumer's event source reports partial batch failures
# (FunctionResponseTypes, merged from the template onto Chalice's event source): without it Lambda
# would delete a batch's failed deliveries with the rest.
# DynamoDB adds at most one global secondary index per table per update: a stack made before a
# table gained several indexes (agents: to_review, by_tool, due, outbox) must be brought there one
# index per deploy (edit a copy of the template), or CloudFormation rolls the update back.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: infra/deploy.sh [--preview] STAGE S3_BUCKET [--tag Key=Value ...] [Parameter=value ...]
       infra/deploy.sh --rollback STAGE S3_BUCKET
       infra/deploy.sh --rollback-alias STAGE"
valid_stage() {
  if ! [[ $1 =~ ^[a-z][a-z0-9-]{0,20}$ ]] || [[ $1 == *- ]] || [[ $1 == *--* ]]; then
    echo "a stage is lower-case letters, digits and single dashes, starting with a letter, at most 21: $1" >&2
    exit 2
  fi
}
mode=deploy
case ${1:-} in
  --preview) mode=preview; shift ;;
  --rollback) mode=rollback; shift ;;
  --rollback-alias)
    # Seconds, no CloudFormation: every function's alias `live` back to the version before it.
    stage=${2:?$usage}
    valid_stage "$stage"
    # read first, not in the loop's word list: a failure there (no such stack) would end the loop
    # with nothing done and the script would say it rolled back
    if ! functions=$(aws cloudformation describe-stack-resources --stack-name "workset-$stage" \
        --query "StackResources[?ResourceType=='AWS::Lambda::Function'].PhysicalResourceId" --output text) ||
       [ -z "${functions//[[:space:]]/}" ] || [ "$functions" = None ]; then
      echo "no functions found in the stack workset-$stage: is $stage the stage's name?" >&2; exit 1
    fi
    # every target found before any alias moves: stopping halfway would leave a mixed release
    moves=()
    for function in $functions; do
      current=$(aws lambda get-alias --function-name "$function" --name live --query FunctionVersion --output text)
      previous=$(aws lambda list-versions-by-function --function-name "$function" --query "Versions[].Version" \
        --output text | tr '\t' '\n' | { grep -E '^[0-9]+$' || true; } | awk -v c="$current" '$1 < c' | sort -n | tail -1)
      if [ -z "$previous" ]; then echo "$function: no version before $current; no alias moved" >&2; exit 1; fi
      moves+=("$function $current $previous")
    done
    for move in "${moves[@]}"; do
      read -r function current previous <<<"$move"
      aws lambda update-alias --function-name "$function" --name live --function-version "$previous" >/dev/null
      echo "$function: live $current -> $previous"
    done
    echo "the stack still names the newer versions: the next deploy (or --rollback) settles it"
    exit 0 ;;
esac
stage=${1:?$usage}
bucket=${2:?$usage}
shift 2
valid_stage "$stage"
tags=()
overrides=()
access_logs=On
while [ $# -gt 0 ]; do
  case $1 in
    --tag)
      if ! [[ ${2:-} =~ ^[A-Za-z0-9_.:/+@\ -]{1,128}=[A-Za-z0-9_.:/+@=\ -]{0,256}$ ]]; then
        echo "--tag takes Key=Value (letters, digits, spaces and _.:/+@=-): ${2:-}" >&2; exit 2
      fi
      tags+=("$2"); shift ;;
    PublicDomain=* | AlarmTopicArn=* | AlarmEmail=* | LogRetentionInDays=* | ApiThrottleRateLimit=* | ApiThrottleBurstLimit=* | WebAclArn=* | PermissionsBoundaryArn=* | Tracing=* | CostCenter=* | EndpointType=* | ApiAccessLogs=* | ApiReservedConcurrency=* | HistoryRetentionDays=* | Backups=* | BackupRetentionDays=* | BackupCopyVaultArn=* | TablesKmsKeyArn=* | LogsKmsKeyArn=* | AlarmTopicKmsKeyArn=* | QueuesKmsKeyArn=* | AlarmApiErrorRatePercent=* | AlarmVendorFailureRatePercent=* | AlarmVendorMinCalls=* | AlarmVendorFailurePeriods=* | AlarmLatencyP99Ms=* | AlarmQueueAgeSeconds=* | AlarmConcurrentExecutions=* | AlarmFunctionErrors=* | AlarmTableThrottleEvents=* | MaxListensPerAccount=*) ;;
    *) echo "unknown parameter override: $1" >&2; echo "$usage" >&2; exit 2 ;;
  esac
  if [[ $1 == *=* ]]; then overrides+=("$1"); fi
  if [[ $1 == ApiAccessLogs=* ]]; then access_logs=${1#ApiAccessLogs=}; fi
  shift
done
if [ "$mode" = rollback ] && [ $((${#tags[@]} + ${#overrides[@]})) -gt 0 ]; then
  # it deploys the old template with the stack's current parameters and tags: what is given here
  # would be dropped without a word
  echo "--rollback takes no parameter or tag (it keeps the stack's): ${tags[*]} ${overrides[*]}" >&2; exit 2
fi
stack=workset-$stage
releases=s3://$bucket/$stack/releases

# Early checks: each answers in a second, before a 3-minute build.
if ! command -v aws >/dev/null; then
  echo "the AWS CLI is not installed (aws): https://docs.aws.amazon.com/cli/ (version 2)" >&2; exit 1
fi
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-$(aws configure get region || true)}
if [ -z "$AWS_DEFAULT_REGION" ]; then echo "no AWS region: set AWS_DEFAULT_REGION or aws configure" >&2; exit 1; fi
if ! account=$(aws sts get-caller-identity --query Account --output text 2>/dev/null); then
  echo "no usable AWS credentials (aws sts get-caller-identity failed): aws configure, or aws sso login" >&2; exit 1
fi
if ! aws s3api head-bucket --bucket "$bucket" >/dev/null 2>&1; then
  echo "bucket $bucket is missing or not yours in account $account: aws s3 mb s3://$bucket" >&2; exit 1
fi
if [ "$mode" != rollback ] && [ "$access_logs" = On ]; then
  role=$(aws apigateway get-account --query cloudwatchRoleArn --output text 2>/dev/null || true)
  if [ -z "$role" ] || [ "$role" = None ]; then
    echo "API Gateway in $AWS_DEFAULT_REGION has no CloudWatch role, which access logs need: set one once per" >&2
    echo "region (README.md, Deploying to AWS), or deploy with ApiAccessLogs=Off" >&2
    exit 1
  fi
fi
echo "deploying stage $stage as $stack to account $account in $AWS_DEFAULT_REGION"

if [ "$mode" = rollback ]; then
  mapfile -t kept < <(aws s3 ls "$releases/" | awk '{print $4}' | grep '\.yaml$' | sort)
  # Replayed oldest first as a stack: a release is pushed; a rollback's copy
  # (<time>-rollback-to-<release>) pops back to the release it returned to. The top is what runs;
  # the one under it is where this rollback goes, so a second rollback goes one further back,
  # never forward again to the release just rolled back from.
  previous=$(printf '%s\n' "${kept[@]}" | awk '
    NF { n = split($0, parts, "-rollback-to-")
         if (n == 1) { stack[++top] = $0; next }
         while (top > 0 && stack[top] != parts[n]) top--
         if (top == 0) stack[++top] = parts[n] }
    END { if (top >= 2) print stack[top - 1] }')
  if [ -z "$previous" ]; then echo "no earlier release of $stack in $releases/" >&2; exit 1; fi
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  aws s3 cp --quiet "$releases/$previous" "$out/packaged.yaml"
  echo "rolling $stack back to $previous"
  aws cloudformation deploy --template-file "$out/packaged.yaml" --stack-name "$stack" \
    --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND --no-fail-on-empty-changeset \
    --parameter-overrides "Stage=$stage"
  # kept as the newest: the next rollback reads from it what now runs
  aws s3 cp --quiet "$out/packaged.yaml" "$releases/$(date -u +%Y%m%dT%H%M%SZ)-rollback-to-$previous"
  exit 0
fi

out=build/deploy-$stage
infra/build.sh "$stage" "$out"
# The console secret: made once, never overwritten (describe-parameters answers without decrypting).
secret_name=/workset/$stage/console-secret
secret_type=$(aws ssm describe-parameters --parameter-filters "Key=Name,Values=$secret_name" \
  --query "Parameters[0].Type" --output text)
if [ "$secret_type" = "None" ]; then
  secret_file=$(mktemp)
  trap 'rm -f "$secret_file"' EXIT
  # file:// keeps the value off the command line (and out of the process list)
  .venv/bin/python -c 'import secrets, sys; sys.stdout.write(secrets.token_urlsafe(48))' >"$secret_file"
  aws ssm put-parameter --name "$secret_name" --type SecureString --value "file://$secret_file" \
    --description "Workset $stage: signs console sessions" >/dev/null
  rm -f "$secret_file"
  echo "made $secret_name"
elif [ "$secret_type" != "SecureString" ]; then
  echo "$secret_name is a $secret_type: delete it, or make it a SecureString, and run again" >&2
  exit 1
fi

# Log groups Lambda made before the stack owned them (see the top of this file).
if aws cloudformation describe-stacks --stack-name "$stack" >/dev/null 2>&1 &&
   ! aws cloudformation describe-stack-resource --stack-name "$stack" \
       --logical-resource-id APIHandlerLogGroup >/dev/null 2>&1; then
  functions=$(.venv/bin/python -c 'import json, sys
resources = json.load(open(sys.argv[1]))["Resources"]
print(" ".join(i for i, r in resources.items() if r["Type"] == "AWS::Serverless::Function"))' "$out/sam.json")
  existing=()
  for function in $functions; do
    name=$(aws cloudformation describe-stack-resource --stack-name "$stack" --logical-resource-id "$function" \
      --query StackResourceDetail.PhysicalResourceId --output text 2>/dev/null) || continue
    found=$(aws logs describe-log-groups --log-group-name-prefix "/aws/lambda/$name" \
      --query "length(logGroups[?logGroupName=='/aws/lambda/$name'])" --output text)
    if [ "$found" != "0" ]; then existing+=("/aws/lambda/$name"); fi
  done
  if [ ${#existing[@]} -gt 0 ]; then
    echo "The stack now makes its functions' log groups, and these exist already (Lambda made them):" >&2
    for group in "${existing[@]}"; do echo "  aws logs delete-log-group --log-group-name $group" >&2; done
    echo "Export what you need from them, run the commands above, then deploy again." >&2
    exit 1
  fi
fi

aws cloudformation package --template-file "$out/sam.json" --s3-bucket "$bucket" \
  --output-template-file "$out/packaged.yaml"
deploy=(aws cloudformation deploy --template-file "$out/packaged.yaml" --stack-name "$stack"
  --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND --no-fail-on-empty-changeset
  --parameter-overrides "Stage=$stage" "${overrides[@]}")
if [ ${#tags[@]} -gt 0 ]; then deploy+=(--tags "${tags[@]}"); fi
if [ "$mode" = preview ]; then
  "${deploy[@]}" --no-execute-changeset | tee "$out/change-set.txt"
  # the change set this deploy made, as the CLI names it: the stack's newest may be another
  # preview's, or (nothing to change) the empty one CloudFormation keeps as failed
  change_set=$(grep -Eo 'arn:aws[a-z-]*:cloudformation:[^ ]+:changeSet/[^ ]+' "$out/change-set.txt" | tail -1 || true)
  if [ -z "$change_set" ]; then
    echo "no change set to apply: $stack already runs this release with these parameters and tags"
    exit 0
  fi
  aws cloudformation describe-change-set --change-set-name "$change_set" \
    --query "Changes[].ResourceChange.{action:Action,resource:LogicalResourceId,type:ResourceType,replace:Replacement}" \
    --output table
  echo "to apply it: aws cloudformation execute-change-set --change-set-name $change_set"
  echo "(then keep it as a release: aws s3 cp $out/packaged.yaml $releases/\$(date -u +%Y%m%dT%H%M%SZ).yaml)"
  exit 0
fi
"${deploy[@]}" | tee "$out/deploy.txt"
# A release is kept only when its template is new: a copy of the newest one would make a rollback
# target that changes nothing (a rollback keeps the stack's current parameters and tags).
newest=$(aws s3 ls "$releases/" 2>/dev/null | awk '{print $4}' | grep '\.yaml$' | sort | tail -1 || true)
if grep -q "No changes to deploy" "$out/deploy.txt"; then
  echo "nothing changed: $stack already runs this release with these parameters and tags"
fi
if [ -n "$newest" ] && aws s3 cp --quiet "$releases/$newest" "$out/newest-release.yaml" &&
   cmp -s "$out/packaged.yaml" "$out/newest-release.yaml"; then
  echo "the template is the newest release's ($newest): no new release kept"
else
  # new, or running but never kept (a preview's change set executed by hand)
  aws s3 cp --quiet "$out/packaged.yaml" "$releases/$(date -u +%Y%m%dT%H%M%SZ).yaml"
  echo "kept as a release: $releases/"
fi
aws cloudformation describe-stacks --stack-name "$stack" --query "Stacks[0].Outputs" --output table
