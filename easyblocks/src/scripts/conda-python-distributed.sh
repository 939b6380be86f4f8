#!/bin/bash
# conda-python-distributed: run python as one rank of a torch.distributed job, one rank per Slurm task:
#   srun singularity exec $SIF conda-python-distributed -u train.py
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
# shellcheck disable=SC1091
source /runscripts/distributed-env

# The number of tasks on this node, from Slurm's compressed list such as '2(x3),1'.
tasks_on_this_node() {
    local list="${SLURM_STEP_TASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-1}}" node="${SLURM_NODEID:-0}" item count repeat
    local IFS=,
    for item in $list; do
        count="${item%(*}"
        repeat=1
        if [[ "$item" == *"(x"* ]]; then
            repeat="${item#*(x}"
            repeat="${repeat%)}"
        fi
        if [ "$node" -lt "$repeat" ]; then
            echo "$count"
            return
        fi
        node=$((node - repeat))
    done
    echo 1
}

# One GPU per rank: the local rank's GPU, or the local rank's entry if several GPUs are visible.
if [ -z "${ROCR_VISIBLE_DEVICES:-}" ]; then
    export ROCR_VISIBLE_DEVICES="$SLURM_LOCALID"
elif [[ "$ROCR_VISIBLE_DEVICES" == *,* ]]; then
    IFS=, read -r -a gpus <<< "$ROCR_VISIBLE_DEVICES"
    export ROCR_VISIBLE_DEVICES="${gpus[$((SLURM_LOCALID % ${#gpus[@]}))]}"
fi

export WORLD_SIZE="${SLURM_NTASKS:-${SLURM_NPROCS:-1}}"
export RANK="$SLURM_PROCID"
export LOCAL_RANK="$SLURM_LOCALID"
export LOCAL_WORLD_SIZE="${SLURM_NTASKS_PER_NODE:-$(tasks_on_this_node)}"

affinity=$(grep -s Cpus_allowed_list /proc/self/status | cut -f2)
echo "Rank $RANK on $(hostname): CPUs ${affinity:-unknown}, GPU $ROCR_VISIBLE_DEVICES," \
     "master $MASTER_ADDR:$MASTER_PORT"

exec python "$@"
