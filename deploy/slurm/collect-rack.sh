#!/bin/sh
# One bundle per node of an allocation, gathered by Slurm itself (no SSH fan-out), then one fleet summary.
#
#   sbatch -N 32 --exclusive deploy/slurm/collect-rack.sh /shared/k3diag/$(date +%F)
#
# Each task runs on its own node (--ntasks-per-node=1); %N in the output name is the node name.
set -eu
OUT=${1:-/shared/k3diag}
mkdir -p "$OUT"
srun --ntasks-per-node=1 --kill-on-bad-exit=0 sh -c "k3diag collect -o '$OUT'/\$(hostname -s).tar.gz"
# or, with the lighter check reports (seconds per node, no bundle):
#   srun --ntasks-per-node=1 sh -c "k3diag check --format json > '$OUT'/\$(hostname -s).json"
k3diag fleet "$OUT" --html "$OUT/fleet.html" --md "$OUT/fleet.md" || true
