#!/bin/sh
# k3diag as Slurm's HealthCheckProgram. In slurm.conf (same file on every node):
#
#   HealthCheckProgram=/usr/local/sbin/k3diag-healthcheck
#   HealthCheckInterval=300
#   HealthCheckNodeState=ANY
#
# slurmd runs this as root with almost no environment (SLURMD_NODENAME, no PATH) and kills it after 60 s;
# its exit code is ignored, so the check drains the node itself (`k3diag check --slurm-drain`): on failure
# with the reason "k3diag: <finding-id> <subject>", and on a later pass it resumes the node only if the
# reason still starts with "k3diag:" (a node drained by hand stays drained).
#
# Settings come from ${K3DIAG_CONF:-/etc/default/k3diag} (a shell fragment), all optional:
#   K3DIAG="/opt/k3diag/bin/k3diag"          the command
#   K3DIAG_ARGS="--expect /etc/k3diag/spec.toml"   extra arguments for `k3diag check`
#   K3DIAG_DEADLINE=30                       seconds for the whole check (under Slurm's 60 s kill)
#   K3DIAG_PROM_DIR=/var/lib/prometheus/node-exporter   node_exporter's textfile folder (written if it exists)
#   K3DIAG_LOG=/var/log/k3diag.log
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
K3DIAG=k3diag
K3DIAG_ARGS=
K3DIAG_DEADLINE=30
K3DIAG_PROM_DIR=/var/lib/prometheus/node-exporter
K3DIAG_LOG=/var/log/k3diag.log
CONF=${K3DIAG_CONF:-/etc/default/k3diag}
# shellcheck disable=SC1090
[ -r "$CONF" ] && . "$CONF"

set -- check --slurm-drain --format nhc --fail-on fail --deadline "$K3DIAG_DEADLINE"
[ -n "$SLURMD_NODENAME" ] && set -- "$@" --node "$SLURMD_NODENAME"
[ -d "$K3DIAG_PROM_DIR" ] && set -- "$@" --prom-file "$K3DIAG_PROM_DIR/k3diag.prom"

# `timeout` backs up k3diag's own deadline: whatever happens, slurmd never has to kill this script.
# One log line per run, written at once (the check's stdout and stderr folded into it).
# shellcheck disable=SC2086
out=$(timeout -k 5 $((K3DIAG_DEADLINE + 15)) $K3DIAG "$@" $K3DIAG_ARGS 2>&1)
status=$?
printf '%s k3diag-healthcheck %s: exit %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "${SLURMD_NODENAME:-$(hostname -s)}" "$status" "$(printf '%s' "$out" | tr '\n' ' ')" >>"$K3DIAG_LOG" 2>&1
exit 0
