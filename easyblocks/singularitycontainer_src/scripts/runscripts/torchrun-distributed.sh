#!/bin/bash
# torchrun-distributed: start torch.distributed.run (torchrun) as the one task of a node; it starts one process per
# GPU of the node and they meet at the master host:
#   srun --ntasks-per-node=1 singularity exec $SIF torchrun-distributed [torchrun options] train.py [args]
#   mpiexec -n <nodes> -ppn 1 singularity exec $SIF torchrun-distributed [torchrun options] train.py [args]
# The processes per node are the node's devices (see distributed-env: the entries of the GPU vendor's variable, else
# SLURM_GPUS_ON_NODE GPUs, each of several devices on Intel's with ZE_FLAT_DEVICE_HIERARCHY=FLAT), else 1; a
# --nproc-per-node=N among the torchrun options overrides that. The node's task picks the rendezvous port as rank 0 of
# conda-python-distributed does (MASTER_PORT); torchrun picks its processes' own.
# Written by EasyBuild's SingularityContainer easyblock into its module's install dir.
# shellcheck disable=SC1091,SC2154  # distributed-env sets launcher_name, devices and the like
source /runscripts/distributed-env

[ "$LOCAL_WORLD_SIZE" -eq 1 ] || die "$launcher_name started $LOCAL_WORLD_SIZE tasks on this node, but" \
    "torchrun-distributed needs one task per node (srun --ntasks-per-node=1, mpiexec -ppn 1, mpirun --map-by" \
    "ppr:1:node); for one task per GPU use conda-python-distributed"

if [ -n "$devices" ]; then
    IFS=, read -r -a device_list <<< "$devices"
    nproc="${#device_list[@]}" source_of_nproc="$devices_from"
    # (torchrun's processes see the node's devices, each taking its local rank's: Slurm's list of GPUs, under FLAT
    # each of several devices, would give them too few)
    export "$device_variable=$devices"
else
    nproc=1 source_of_nproc="no GPUs in the job"
fi

echo "Node $RANK of $WORLD_SIZE ($(hostname), $launcher_name): torchrun with $nproc processes per node" \
     "($source_of_nproc) unless the options say otherwise, rendezvous at $MASTER_ADDR:$MASTER_PORT"

exec python -m torch.distributed.run --nnodes="$WORLD_SIZE" --nproc-per-node="$nproc" --rdzv-backend=c10d \
    --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="${SLURM_JOB_ID:-0}.$MASTER_PORT" "$@"
