# The one place the commands start a container.
# find_runtime finds the runtime once per command: singularity, else apptainer, on PATH (runtime), and its kind
# (runtime_kind): apptainer (also as 'singularity', a link to it), or singularity (SingularityCE, or Singularity
# before the split). The install's twin: container.container_command.
runtime='' runtime_kind=''  # (found by find_runtime, never taken from the environment)
find_runtime() {
    [ -z "${runtime_kind:-}" ] || return 0
    # (bash's own search of PATH, whose answer is in BASH_CMDS: no process, at every start; where it has none, a
    # function of that name, say, command -v as before)
    runtime=''
    if hash singularity 2>/dev/null; then
        runtime=${BASH_CMDS[singularity]-}
    elif hash apptainer 2>/dev/null; then
        runtime=${BASH_CMDS[apptainer]-}
    fi
    if [ -z "$runtime" ]; then
        runtime=$(command -v singularity || command -v apptainer) || {
            error "neither singularity nor apptainer is on PATH: load the module of a container runtime"
            return 1
        }
    fi
    set_runtime_kind
}
set_runtime_kind() {  # of the runtime $runtime
    local real=$runtime
    # (a link is followed: Apptainer's singularity is one)
    [ "${real##*/}" = apptainer ] || [ ! -L "$real" ] || real=$(readlink -f -- "$runtime")
    runtime_kind=singularity
    [ "${real##*/}" != apptainer ] || runtime_kind=apptainer
}
# The options every start gives the runtime after its entry (runtime_options, an array): the install's own for this
# kind of runtime (container_runtime_options), then SINGULARITYCONTAINER_RUNTIME_OPTIONS (a site's module or the
# user's), both split into words at spaces, tabs and newlines; quotes, patterns and $ are taken as they are
runtime_option_words() {
    local own=$runtime_options_singularity
    [ "$runtime_kind" != apptainer ] || own=$runtime_options_apptainer
    IFS=$' \t\n' read -rd '' -a runtime_options <<<"$own ${SINGULARITYCONTAINER_RUNTIME_OPTIONS:-}" || true
}
# in_container [--exec] IMAGE COMMAND...: the runtime in place of this shell (call it in a subshell to come back),
# with the install's entry (container_entry; --exec: exec, for a probe that must not go through the image's
# runscript), the runtime's options, the image and the command; without the lock's descriptor 9: the runtime's FUSE
# daemons can outlive a killed command, and would hold the lock for everyone
in_container() {
    local entry=$container_entry
    if [ "$1" = --exec ]; then
        entry='exec'
        shift
    fi
    find_runtime || exit 1
    runtime_option_words
    exec "$runtime" "$entry" "${runtime_options[@]}" "$@" 9>&-
}
