# shellcheck shell=bash
# distributed-env: source this in each task (rank) of a torch.distributed job, in the container, to set the job up:
# the image's environment, the virtual environment and the caches (init-conda-venv), the rank (RANK, WORLD_SIZE,
# LOCAL_RANK, LOCAL_WORLD_SIZE), the master (MASTER_ADDR, MASTER_PORT) and the node's GPUs (gpu_vendor @gpu_vendor@).
# Written by EasyBuild's SingularityContainer easyblock into its module's install dir.
#
# The rank comes from the launcher that started the task, the first of these whose variables are all set:
#   mpirun (Open MPI)                  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
#                                      OMPI_COMM_WORLD_LOCAL_SIZE
#   mpiexec (hydra: MPICH, Intel MPI)  PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
#   srun --mpi=pmix                    PMIX_RANK, with Slurm's sizes
#   srun                               SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE
#   none of these                      RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, set by you (another launcher)
# An MPI's processes in a Slurm job run under its daemons, which srun started one per node: their Slurm variables
# describe the daemon, not the rank, so the MPIs come first.
#
# MASTER_ADDR, unless set: the first node of the Slurm job (get-master). Outside a Slurm job, set it to the host of
# rank 0.
# MASTER_PORT, unless set: rank 0 picks a free port at random and passes it to the other ranks through a file only you
# can read, in a directory of yours that all the job's nodes see; they wait for it a bounded time, then stop with a
# message. See master-port for the directory ($SINGULARITYCONTAINER_PORT_DIR, default ~/.singularitycontainer-ports),
# the wait ($SINGULARITYCONTAINER_PORT_WAIT, default 300 s) and the ports ($SINGULARITYCONTAINER_PORT_RANGE, default
# 10000-31999). The file is the job step's: in a Slurm job, its job id and its step or the MPI's PMIx namespace;
# outside Slurm, the master's host and the launch's name (Open MPI's mpirun has one, MPICH's mpiexec none: there,
# set MASTER_PORT).

die() {
    echo "${0##*/}: error: $*" >&2
    exit 1
}

# The number of tasks of this job step on this node, from Slurm's compressed list such as '2(x3),1'; nothing without
# one. Only srun sets the step's: a batch script has the job's SLURM_TASKS_PER_NODE, and the batch step's own
# SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS, none of which is a launch of ranks.
slurm_tasks_on_this_node() {
    local list="${SLURM_STEP_TASKS_PER_NODE:-}" node="${SLURM_NODEID:-0}" item count repeat
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
}

# The launchers, in the order they are tried: a name, then the variables of the rank, the world size, the local
# rank and the local world size (slurm_tasks_on_node is this script's, from slurm_tasks_on_this_node).
LAUNCHERS=(
    "mpirun (Open MPI):OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE"
    "mpiexec (hydra):PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS"
    "srun --mpi=pmix:PMIX_RANK SLURM_NTASKS SLURM_LOCALID slurm_tasks_on_node"
    "srun:SLURM_PROCID SLURM_NTASKS SLURM_LOCALID slurm_tasks_on_node"
    "your own settings:RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE"
)

# The first launcher whose variables are all set: prints its name and the four variables' names, or fails
find_launcher() {
    local launcher name
    for launcher in "${LAUNCHERS[@]}"; do
        for name in ${launcher#*:}; do
            [ -n "${!name:-}" ] || continue 2
        done
        echo "$launcher"
        return 0
    done
    return 1
}

# Stops unless the value of variable $1 is a number below the value of variable $2 (0 <= rank < size)
check_rank() {
    local rank_name=$1 size_name=$2
    [[ "${!rank_name}" =~ ^[0-9]+$ && "${!size_name}" =~ ^[1-9][0-9]*$ ]] ||
        die "$rank_name=${!rank_name} and $size_name=${!size_name} must be numbers"
    [ "${!rank_name}" -lt "${!size_name}" ] ||
        die "$rank_name=${!rank_name} is not below $size_name=${!size_name}"
}

# shellcheck disable=SC2034  # read through LAUNCHERS
slurm_tasks_on_node=$(slurm_tasks_on_this_node)
if ! launcher=$(find_launcher); then
    echo "${0##*/}: error: not started by a launcher that it knows: none of these sets of variables is complete:" >&2
    for launcher in "${LAUNCHERS[@]}"; do
        names=${launcher#*:}
        echo "  ${launcher%%:*}: ${names/slurm_tasks_on_node/SLURM_STEP_TASKS_PER_NODE}" >&2
    done
    echo "Start it with srun, mpiexec or mpirun, e.g.: srun singularity exec \$SIF ${0##*/} -u train.py" >&2
    exit 1
fi
# shellcheck disable=SC2034  # for the run scripts that source this file
launcher_name=${launcher%%:*}
read -r rank_var world_var local_rank_var local_world_var <<< "${launcher#*:}"
check_rank "$rank_var" "$world_var"
check_rank "$local_rank_var" "$local_world_var"
export RANK=${!rank_var} WORLD_SIZE=${!world_var} LOCAL_RANK=${!local_rank_var} LOCAL_WORLD_SIZE=${!local_world_var}
unset launcher slurm_tasks_on_node rank_var world_var local_rank_var local_world_var

# shellcheck disable=SC1091
source /runscripts/init-conda-venv || exit 1
set -euo pipefail

# The GPUs, by gpu_vendor: the variable that gives a process its devices, and the commands that list them
gpu_vendor=@gpu_vendor@
case "$gpu_vendor" in
    amd) device_variable=ROCR_VISIBLE_DEVICES device_tools=("rocm-smi") ;;
    intel) device_variable=ZE_AFFINITY_MASK device_tools=("xpu-smi discovery" "sycl-ls") ;;
    nvidia) device_variable=CUDA_VISIBLE_DEVICES device_tools=("nvidia-smi") ;;
    *) device_variable="" device_tools=() ;;
esac

# The devices of this node that the job's processes share, comma-separated, then where that came from. One rule per
# vendor:
#   vendor  variable              a value set (by Slurm or you)                  no value: SLURM_GPUS_ON_NODE=N
#   amd     ROCR_VISIBLE_DEVICES  its entries                                    0..N-1
#   nvidia  CUDA_VISIBLE_DEVICES  its entries                                    0..N-1
#   intel   ZE_AFFINITY_MASK      FLAT: Slurm's list of GPUs (numbers, as many   FLAT: 0..N*S-1 (S stacks per GPU,
#                                 as the step's SLURM_STEP_GPUS or N) is S       each a device)
#                                 stacks per GPU, G*S..G*S+S-1; any other value
#                                 (Dawn's 0..N*S-1, say), its entries;
#                                 COMPOSITE: its entries                         COMPOSITE: 0..N-1
# FLAT or COMPOSITE is ZE_FLAT_DEVICE_HIERARCHY (Level Zero's default: FLAT); S is $SINGULARITYCONTAINER_STACKS_PER_GPU
# (default 2: a Data Center GPU Max 1550, as Dawn's). Slurm's value names GPUs, which under FLAT are not devices:
# taken as they are, 8 ranks of a node with 4 GPUs would share stacks 0-3 (Dawn's own scripts rewrite it for this).
# With a GPU per task (srun --gpu-bind=single:N or map_gpu, --gpus-per-task), Slurm gives each task its GPUs in both
# ZE_AFFINITY_MASK and SLURM_STEP_GPUS, and SLURM_GPUS_ON_NODE stays the node's count.
# Nothing when there are no GPUs, or nothing tells.
stacks_per_gpu="${SINGULARITYCONTAINER_STACKS_PER_GPU:-2}"
[[ "$stacks_per_gpu" =~ ^[1-9][0-9]*$ ]] ||
    die "SINGULARITYCONTAINER_STACKS_PER_GPU=$stacks_per_gpu is not a number of stacks (of devices) per Intel GPU"
stacks_of_gpus() {  # the devices of the comma-separated GPUs $1 under FLAT
    local gpu stack stacks=()
    local IFS=,
    for gpu in $1; do
        for ((stack = 0; stack < stacks_per_gpu; stack++)); do
            stacks+=($((gpu * stacks_per_gpu + stack)))
        done
    done
    echo "${stacks[*]}"
}
count_of() {  # the entries of the comma-separated list $1
    local IFS=, entries
    read -ra entries <<<"$1"
    echo "${#entries[@]}"
}
slurms_gpus() {  # whether ZE_AFFINITY_MASK is a list of GPUs that Slurm gave (numbers, as many as it gave the step)
    [[ "${ZE_AFFINITY_MASK:-}" =~ ^[0-9]+(,[0-9]+)*$ ]] || return 1
    [ "$(count_of "$ZE_AFFINITY_MASK")" = "${SLURM_GPUS_ON_NODE:-}" ] ||
        { [[ "${SLURM_STEP_GPUS:-}" =~ ^[0-9]+(,[0-9]+)*$ ]] &&
            [ "$(count_of "$ZE_AFFINITY_MASK")" = "$(count_of "$SLURM_STEP_GPUS")" ]; }
}
node_devices() {
    local gpus="${SLURM_GPUS_ON_NODE:-}" flat=
    [ "$gpu_vendor" != intel ] || [ "${ZE_FLAT_DEVICE_HIERARCHY:-FLAT}" != FLAT ] || flat=yes
    if [ -z "$device_variable" ]; then
        return
    elif [ -n "$flat" ] && slurms_gpus; then
        echo "$(stacks_of_gpus "$ZE_AFFINITY_MASK") Slurm's GPUs ZE_AFFINITY_MASK=$ZE_AFFINITY_MASK x" \
            "$stacks_per_gpu stacks (ZE_FLAT_DEVICE_HIERARCHY=FLAT)"
    elif [ -n "${!device_variable:-}" ]; then
        echo "${!device_variable} $device_variable"
    elif [[ ! "$gpus" =~ ^[1-9][0-9]*$ ]]; then
        return
    elif [ -n "$flat" ]; then
        echo "$(seq -s, 0 $((gpus * stacks_per_gpu - 1))) SLURM_GPUS_ON_NODE x $stacks_per_gpu stacks" \
            "(ZE_FLAT_DEVICE_HIERARCHY=FLAT)"
    else
        echo "$(seq -s, 0 $((gpus - 1))) SLURM_GPUS_ON_NODE"
    fi
}
# shellcheck disable=SC2034  # for the run scripts that source this file
read -r devices devices_from <<< "$(node_devices)" || :

# The vendor's device line, once per node, where its tool is in the container
if [ "$LOCAL_RANK" -eq 0 ]; then
    for tool in "${device_tools[@]}"; do
        if command -v "${tool%% *}" >/dev/null 2>&1; then
            $tool || echo "${0##*/}: warning: $tool failed" >&2
            break
        fi
    done
fi

if [ -z "${MASTER_ADDR:-}" ]; then
    [ -n "${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}" ] ||
        die "MASTER_ADDR is not set, and there is no Slurm job to take the first node from: set it to the host" \
            "of rank 0 (export MASTER_ADDR=<host>; mpiexec -genv and mpirun -x pass it on)"
    MASTER_ADDR=$(/runscripts/get-master) || die "cannot tell the master host from the job's node list (see above)"
fi
export MASTER_ADDR

# The job step's name for master-port's file, in letters, digits and '._-': in a Slurm job, the job, its requeues, and
# the step (or the PMIx namespace, which all ranks of an MPI share while its daemons run in a step of their own);
# outside Slurm, the name of the launch that the launcher gives all its ranks (Open MPI's mpirun: PMIX_NAMESPACE, from
# its host and process id; a hydra that sets PMI_KVSNAME) on the master's host. MPICH's hydra gives none.
job_step() {
    local step="${PMIX_NAMESPACE:-${SLURM_STEP_ID:-}}" launch="${PMIX_NAMESPACE:-${PMI_KVSNAME:-}}"
    if [ -n "${SLURM_JOB_ID:-}" ]; then
        [ -n "$step" ] &&
            echo "${SLURM_JOB_ID//[^A-Za-z0-9._-]/_}.${SLURM_RESTART_COUNT:-0}.${step//[^A-Za-z0-9._-]/_}"
    else
        [ -n "$launch" ] && echo "mpi.${MASTER_ADDR//[^A-Za-z0-9._-]/_}.${launch//[^A-Za-z0-9._-]/_}"
    fi
}
if [ -z "${MASTER_PORT:-}" ] && ! step_name=$(job_step); then
    if [ -n "${SLURM_JOB_ID:-}" ]; then
        die "MASTER_PORT is not set, and rank 0 can pass its choice to the other ranks only in a Slurm job step" \
            "(SLURM_JOB_ID, and SLURM_STEP_ID or PMIX_NAMESPACE): set it to a free port on $MASTER_ADDR"
    fi
    die "MASTER_PORT is not set, and outside Slurm rank 0 can pass its choice to the other ranks only under the" \
        "name of their launch (PMIX_NAMESPACE of Open MPI's mpirun, or PMI_KVSNAME), which $launcher_name does not" \
        "give: set it to a free port on $MASTER_ADDR (mpiexec -genv MASTER_PORT <port>)"
fi
if [ -z "${MASTER_PORT:-}" ]; then
    MASTER_PORT=$(/runscripts/master-port "$RANK" "$step_name") || exit 1
fi
export MASTER_PORT
