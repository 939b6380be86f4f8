# shellcheck shell=bash
# distributed-env: source this in a Slurm task in the container to set up a torch.distributed job: the image's
# environment, the virtual environment and the caches (init-conda-venv), MASTER_ADDR and MASTER_PORT.
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
#
# MASTER_PORT, unless set by the user, is 10000 + (SLURM_JOB_ID * 16 + SLURM_STEP_ID) % 22000: in
# 10000-31999 (below Linux's ephemeral ports), distinct for concurrent jobs and job steps on a node
# unless their job ids are a multiple of 1375 apart or a job runs more than 16 steps at once.

die() {
    echo "${0##*/}: error: $*" >&2
    exit 1
}
if [ -z "${SLURM_PROCID:-}" ]; then
    echo "${0##*/}: error: not running as a Slurm task (SLURM_PROCID is not set)." >&2
    echo "Start it with srun, e.g.: srun singularity exec \$SIF ${0##*/} -u train.py" >&2
    exit 1
fi
[ -n "${SLURM_LOCALID:-}" ] || die "SLURM_LOCALID is not set, but SLURM_PROCID is: start it with srun, not by hand"
# shellcheck disable=SC1091
source /runscripts/init-conda-venv || exit 1
set -euo pipefail

if [ "$SLURM_LOCALID" -eq 0 ] && command -v rocm-smi >/dev/null 2>&1; then
    rocm-smi || echo "${0##*/}: warning: rocm-smi failed" >&2
fi

if [ -z "${MASTER_ADDR:-}" ]; then
    MASTER_ADDR=$(/runscripts/get-master) || die "cannot tell the master host from the job's node list (see above)"
fi
export MASTER_ADDR
export MASTER_PORT="${MASTER_PORT:-$((10000 + (${SLURM_JOB_ID:-0} * 16 + ${SLURM_STEP_ID:-0}) % 22000))}"
