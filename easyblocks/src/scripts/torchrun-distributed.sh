#!/bin/bash
# torchrun-distributed: start torch.distributed.run (torchrun) as the one Slurm task of a node; it starts one
# process per GPU of the node and they meet at the master host:
#   srun --ntasks-per-node=1 singularity exec $SIF torchrun-distributed [torchrun options] train.py [args]
# The processes per node are the node's GPUs (SLURM_GPUS_ON_NODE, else ROCR_VISIBLE_DEVICES), else 1; a
# --nproc-per-node=N among the torchrun options overrides that.
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
# shellcheck disable=SC1091
source /runscripts/distributed-env

nodes="${SLURM_STEP_NUM_NODES:-${SLURM_JOB_NUM_NODES:-1}}"
tasks="${SLURM_STEP_NUM_TASKS:-${SLURM_NTASKS:-1}}"
[ "$tasks" = "$nodes" ] || die "this job step runs $tasks tasks on $nodes nodes, but torchrun-distributed needs" \
    "one task per node (srun --ntasks-per-node=1); for one task per GPU use conda-python-distributed"

if [ -n "${SLURM_GPUS_ON_NODE:-}" ]; then
    nproc="$SLURM_GPUS_ON_NODE" source_of_nproc=SLURM_GPUS_ON_NODE
elif [ -n "${ROCR_VISIBLE_DEVICES:-}" ]; then
    IFS=, read -r -a gpus <<< "$ROCR_VISIBLE_DEVICES"
    nproc="${#gpus[@]}" source_of_nproc=ROCR_VISIBLE_DEVICES
else
    nproc=1 source_of_nproc="no GPUs in the job"
fi

echo "Node $SLURM_NODEID of $nodes ($(hostname)): torchrun with $nproc processes per node ($source_of_nproc)" \
     "unless the options say otherwise, rendezvous at $MASTER_ADDR:$MASTER_PORT"

exec python -m torch.distributed.run --nnodes="$nodes" --nproc-per-node="$nproc" --rdzv-backend=c10d \
    --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="${SLURM_JOB_ID:-0}.${SLURM_STEP_ID:-0}" "$@"
