#!/bin/sh
# k3diag as a Slurm Prolog: the node is checked before each job starts on it. In slurm.conf:
#
#   Prolog=/usr/local/sbin/k3diag-prolog
#   PrologFlags=Alloc        # run at allocation, not at the first job step
#
# A failing Prolog makes Slurm requeue the job and drain the node, so a node that fails the check never runs
# the job. The check drains first with a "k3diag: ..." reason; Slurm may then replace that reason with its
# own "Prolog error", which k3diag will not resume (it resumes only its own reasons): clear those by hand
# after the fix (`scontrol update NodeName=<node> State=RESUME`). Keep the deadline short: the job waits.
# Settings: the same ${K3DIAG_CONF:-/etc/default/k3diag} as k3diag-healthcheck.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
K3DIAG=k3diag
K3DIAG_ARGS=
K3DIAG_PROLOG_DEADLINE=15
K3DIAG_LOG=/var/log/k3diag.log
CONF=${K3DIAG_CONF:-/etc/default/k3diag}
# shellcheck disable=SC1090
[ -r "$CONF" ] && . "$CONF"

set -- check --slurm-drain --format nhc --fail-on fail --deadline "$K3DIAG_PROLOG_DEADLINE"
[ -n "$SLURMD_NODENAME" ] && set -- "$@" --node "$SLURMD_NODENAME"
# shellcheck disable=SC2086
out=$(timeout -k 5 $((K3DIAG_PROLOG_DEADLINE + 10)) $K3DIAG "$@" $K3DIAG_ARGS 2>>"$K3DIAG_LOG")
status=$?
[ -n "$out" ] && printf '%s prolog job %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${SLURM_JOB_ID:-}" "$out" >>"$K3DIAG_LOG"
# 2 = a failure was found: fail the prolog. 0/1 (ok, warnings) and 3 (could not judge) let the job run.
[ "$status" -eq 2 ] && exit 1
exit 0
