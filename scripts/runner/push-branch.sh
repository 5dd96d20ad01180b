#!/usr/bin/env bash
# Push HEAD to a new branch of REMOTE (default: origin's URL) with the token in GH_TOKEN, without the
# token ever being on a command line (/proc/<pid>/cmdline is readable by every user of the machine):
# git reads it from its environment as an http.extraheader (GIT_CONFIG_COUNT/KEY/VALUE, git 2.31+),
# the way actions/checkout hands git its token. Used by .github/workflows/refresh-baselines.yml.
#
#   GH_TOKEN=... scripts/runner/push-branch.sh BRANCH [REMOTE]
set -euo pipefail
branch=${1:?usage: push-branch.sh BRANCH [REMOTE_URL]}
remote=${2:-$(git remote get-url origin)}
: "${GH_TOKEN:?GH_TOKEN must hold the token}"
case "$remote" in
  http://*|https://*) ;;
  *) echo "push-branch.sh: ${remote}: not an http(s) URL" >&2; exit 2 ;;
esac
host=${remote%"${remote#*://*/}"}            # scheme://host/ of the URL
auth=$(printf 'x-access-token:%s' "$GH_TOKEN" | base64 | tr -d '\n')   # printf is a builtin: no process
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0="http.${host}.extraheader" GIT_CONFIG_VALUE_0="AUTHORIZATION: basic ${auth}"
git push "$remote" "HEAD:refs/heads/${branch}"
