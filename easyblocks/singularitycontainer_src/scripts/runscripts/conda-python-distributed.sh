#!/bin/bash
# conda-python-distributed: run python as one rank of a torch.distributed job, one rank per task of the launcher:
#   srun singularity exec $SIF conda-python-distributed -u train.py
#   mpiexec -n 16 -ppn 8 singularity exec $SIF conda-python-distributed -u train.py   (MPICH, Intel MPI)
#   mpirun -n 16 --map-by ppr:8:node singularity exec $SIF conda-python-distributed -u train.py   (Open MPI)
# distributed-env says which launchers it knows and how it sets the master.
# Written by EasyBuild's SingularityContainer easyblock into its module's install dir.
# shellcheck disable=SC1091,SC2154  # distributed-env sets launcher_name, devices and the like
source /runscripts/distributed-env

# One device per rank: the local rank's entry of the node's devices (shared round the ranks when they are fewer),
# else the local rank's index
if [ -n "$device_variable" ]; then
    if [ -n "$devices" ]; then
        IFS=, read -r -a device_list <<< "$devices"
        export "$device_variable=${device_list[$((LOCAL_RANK % ${#device_list[@]}))]}"
    else
        export "$device_variable=$LOCAL_RANK"
    fi
    device="$device_variable=${!device_variable}"
else
    device=none
fi

affinity=$(grep -s Cpus_allowed_list /proc/self/status | cut -f2)
echo "Rank $RANK on $(hostname) ($launcher_name): CPUs ${affinity:-unknown}, GPU $device," \
     "master $MASTER_ADDR:$MASTER_PORT"

exec python "$@"
