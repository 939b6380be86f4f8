# shellcheck shell=bash
# @library@: the library of the commands in bin/ of module @module@, sourced by each at its start.
# Written by EasyBuild's SingularityContainer easyblock. bash reads a sourced file whole, at once: a command that runs
# has all of it, whatever a reinstall does to this file meanwhile.

# The install's constants
module=@module_word@
@user_software_paths@
squashfs_name=@us_squashfs@ changes_name=@us_changes@  # (the files of a generation, STATE)
conflicting_modules=(@conflicts@)  # (container_conflicts)
container_entry=@entry@  # (exec or run)
# (container_runtime_options: the options of each kind of runtime, see runtime_option_words)
runtime_options_apptainer=@runtime_options_apptainer@ runtime_options_singularity=@runtime_options_singularity@

# What went wrong, with the command's name ($command_name, set before this is sourced): the library's functions say it
# and return a status, and the command decides whether to stop (die: say it, and stop)
error() {
    echo "$command_name: error: $*" >&2
}
die() {
    error "$@"
    exit 1
}
# The first of the modules this one conflicts with (container_conflicts: their binds collide with its own) that is
# loaded: Lmod refuses this module after one of them, but not one of them after this module
conflicting_module_loaded() {
    local name conflict loaded=()
    IFS=: read -ra loaded <<<"${LOADEDMODULES:-}"
    for name in "${loaded[@]}"; do
        for conflict in "${conflicting_modules[@]}"; do
            if [ "$name" = "$conflict" ] || [ "${name#"$conflict"/}" != "$name" ]; then
                echo "$name"
                return 0
            fi
        done
    done
    return 1
}
# The command's help ($command_help, set with $command_name), for -h and --help; and the command ends
print_help() {
    printf '%s\n' "${command_help[@]}"
    exit 0
}
# For a command that takes no arguments: -h or --help prints its help, any other argument stops it before anything
# is done
no_arguments() {
    case "${1:-}" in
        -h | --help) print_help ;;
        *)
            [ "$#" -eq 0 ] ||
                die "$command_name takes no arguments, '$(printable "$1")' was given (usage: $command_name; -h says" \
                    "more)"
            ;;
    esac
}
@files@
@container@
@readable_by_all@
@layers@
@workdir@
@lock_install_dir@
@change@
@decisions@
@pip_changes_venv@
@bind_user_software@
@keep_venv_python@
# The caches of the install's container_cache_dirs for the job and node this runs in (CACHE_SETUP), exported for the
# container
set_up_caches() {
@cache_setup@
}
