# Starting the container.
# The commands that do (scripts.LAUNCH_KINDS: start-shell, list-packages, the wrappers, venv-pip, the kernel): what
# each checks and prepares first (prepare_launch), and one function for each kind of launch.
# Before the container starts: not inside one, the module loaded (sif: its image), no conflicting module, the runtime
# found (find_runtime), the venv's state read (generation, form) and pinned for this start, the caches set up
prepare_launch() {
    if [ -n "${SINGULARITY_CONTAINER:-}${APPTAINER_CONTAINER:-}" ] || [ -d /.singularity.d/env ]; then
        die "already running inside a container; this command starts the container itself and would nest it"
    fi
    sif="${!sif_variable:-}"
    [ -n "$sif" ] || die "module $module is not loaded; run 'module load $module' first"
    [ -f "$sif" ] ||
        die "container image $sif not found; reload the module (module load $module) or reinstall it with eb"
    if conflicting_module_loaded; then
        die "module $conflicting, loaded after $module, conflicts with it (their binds collide): module unload" \
            "$conflicting"
    fi
    find_runtime || exit 1
    # A runtime that is a script (#!/usr/bin/env python3, say) finds this module's wrappers first on PATH: it would
    # start a wrapper, which starts the runtime again, for ever.
    if [ -n "${SINGULARITYCONTAINER_LAUNCHED_BY:-}" ]; then
        die "$runtime started $SINGULARITYCONTAINER_LAUNCHED_BY, which started $0: a loop. The runtime runs a command" \
            "found on PATH, and this module puts its wrappers there: make the runtime call its interpreter by full path"
    fi
    export SINGULARITYCONTAINER_LAUNCHED_BY="$0"
    generation=$(current_generation "$root")
    form=$(venv_form "$root" "$generation")
    # (the runtime would only say "image format not recognized")
    generation_whole "$generation" quick || die "$(damaged_state "$root" "$generation")"
    if [ "$form" = missing ]; then
        echo "${0##*/}: warning: the virtual environment of $module is missing (neither $packed nor $dir exists):" \
            "Python in the container is the image's own. Reinstall the module (eb --rebuild), or put it back." >&2
    fi
    # The container gets the state of the venv as it is now, both files of it (STATE): not what a venv-pip elsewhere
    # makes current while the runtime opens them one by one
    local name
    for name in SINGULARITY_OVERLAY APPTAINER_OVERLAY SINGULARITY_BINDPATH APPTAINER_BINDPATH; do
        [ -z "${!name:-}" ] || { pinned_entries "$root" "$generation" "${!name}" && export "$name=$pinned"; }
    done
    use_personal_layer "${launch_with_personal_layer-yes}"
    set_up_caches "$cache_parent" "$module" "${cache_dirs[@]}"
}
# start-shell: with no arguments an interactive shell, else bash with these arguments (e.g. -c 'pip list'); either way
# init-conda-venv has prepared the image's environment and activated the virtual environment first.
start_shell() {
    answer_help "$@"
    prepare_launch
    if [ "$#" -eq 0 ]; then
        in_container "$sif" /bin/bash --rcfile /runscripts/init-conda-venv -i
    fi
    export SINGULARITYENV_BASH_ENV=/runscripts/init-conda-venv APPTAINERENV_BASH_ENV=/runscripts/init-conda-venv
    in_container "$sif" /bin/bash "$@"
}
# A command of /runscripts ($1, e.g. list-packages), which prepares itself, with the arguments $2...
launch_runscript() {
    local name=$1
    shift
    answer_help "$@"
    prepare_launch
    in_container "$sif" "/runscripts/$name" "$@"
}
# The words that start the command $1 with the arguments $2... in the container after container_init where the
# install has one (through init-conda-venv), into the array prepared
prepare_command() {
    prepared=("$@")
    if [ -n "$container_init_set" ]; then
        prepared=(/bin/bash -c 'source /runscripts/init-conda-venv && exec "$@"' "$1" "$@")
    fi
}
# The command $1 in the container with the arguments $2..., prepared (prepare_command); in place of this shell
in_container_prepared() {
    prepare_command "$@"
    in_container "$sif" "${prepared[@]}"
}
# A wrapped command ($1, e.g. python) with the arguments $2...: every argument is the command's (no -h of its own)
launch_command() {
    prepare_launch
    in_container_prepared "$@"
}
