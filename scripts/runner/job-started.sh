#!/usr/bin/env bash
# The GPU runner's own gate (docs/ci.md, "Fork pull requests and the self-hosted runner"): a pre-job
# script the runner runs before every job, outside any workflow's reach. Install it on the runner
# machine outside the runner's folder and the checkout, owned by another user than the runner's,
# and name it in the runner's .env:
#
#   ACTIONS_RUNNER_HOOK_JOB_STARTED=/opt/perfgate-runner/job-started.sh
#   PERFGATE_RUNNER_REPOSITORY=OWNER/REPO
#
# GitHub runs it with the job's default variables; any exit status but 0 and "the job will not run
# and will be marked as failed". It lets through only a push to this repository or a manual run
# (people with write access), of the workflows that are meant for this machine. A pull request's
# run (a fork's copy of the workflow files included, whatever they say) and pull_request_target
# never reach it.
set -euo pipefail

ALLOWED_EVENTS=${PERFGATE_RUNNER_EVENTS:-"push workflow_dispatch"}
ALLOWED_WORKFLOWS=${PERFGATE_RUNNER_WORKFLOWS:-"perfgate-gpu.yml refresh-baselines.yml perfgate-bisect.yml"}

refuse() {
  echo "::error title=perfgate runner::job refused by the runner's pre-job script: $1"
  exit 1
}

event=${GITHUB_EVENT_NAME:-}
case " $ALLOWED_EVENTS " in
  *" $event "*) ;;
  *) refuse "event '${event}' is not one of: ${ALLOWED_EVENTS}" ;;
esac

# GITHUB_WORKFLOW_REF: OWNER/REPO/.github/workflows/FILE@REF
workflow_ref=${GITHUB_WORKFLOW_REF:-}
repository=${workflow_ref%%/.github/workflows/*}
file=${workflow_ref#*/.github/workflows/}
file=${file%%@*}
expected=${PERFGATE_RUNNER_REPOSITORY:-${GITHUB_REPOSITORY:-}}
if [ -z "$workflow_ref" ] || [ "$repository" = "$workflow_ref" ]; then
  refuse "no workflow reference (GITHUB_WORKFLOW_REF is '${workflow_ref}')"
fi
[ "$repository" = "$expected" ] && [ "${GITHUB_REPOSITORY:-}" = "$expected" ] \
  || refuse "workflow ${workflow_ref} of repository ${GITHUB_REPOSITORY:-?}, not ${expected}"
case " $ALLOWED_WORKFLOWS " in
  *" $file "*) ;;
  *) refuse "workflow file '${file}' is not one of: ${ALLOWED_WORKFLOWS}" ;;
esac
echo "perfgate runner: ${event} of ${workflow_ref} accepted"
