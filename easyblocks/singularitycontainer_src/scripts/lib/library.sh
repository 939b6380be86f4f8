# shellcheck shell=bash
# (The install's values come first, read-only, written by the easyblock: scripts.install_values. Then these
# functions, then the pieces of scripts.LIBRARY_PIECES. bash reads a sourced file whole, at once: a command that runs
# has all of it, whatever a reinstall does to this file meanwhile.)
@values@
# The start of the regular file $2, at most $3 characters, into the variable named $1, less the newlines at its end (as
# $(head -c) gives it): read by bash itself, no process. Empty where $2 is not a regular file (a FIFO would wait).
read_start() {
    local __start='' LC_ALL=C  # (a name no caller's variable has: printf -v sets the innermost of that name; bytes)
    if [ -f "$2" ]; then
        { IFS= read -r -N "$3" __start <"$2"; } 2>/dev/null || true
    fi
    while [ "${__start%$'\n'}" != "$__start" ]; do
        __start=${__start%$'\n'}
    done
    printf -v "$1" %s "$__start"
}
# Whether a name of the NUL-terminated list in the file $1 holds a newline (read by bash: no process)
holds_a_newline() {
    local names=() IFS=''  # (joined with nothing between them)
    mapfile -d '' -t names <"$1" || return 1
    [[ "${names[*]}" == *$'\n'* ]]
}
# What went wrong, with the command's name ($command_name, set before this is sourced): the library's functions say it
# and return a status, and the command decides whether to stop (die: say it, and stop)
error() {
    echo "$command_name: error: $*" >&2
}
die() {
    error "$@"
    exit 1
}
# A command of another install than this library's (command_stamp, set before it sources this): a reinstall wrote
# this file while the command started, or the command is of a version before the stamps, whose file still ran
[ "${command_stamp:-}" = "$install_stamp" ] ||
    die "the module was reinstalled while $command_name started: run it again"
# Who runs this command, and where, for the records of runs and the checks of ownership, and the install dir's mode:
# found once, by know_who_runs (bash itself, but for the mode), by the commands that change the venv; read as
# ${run_user:-$(id -un)} and the like, so that a function also answers where they are not known. (Set empty here: not
# taken from the environment.)
run_user='' run_group='' run_host='' run_start='' root_mode=''
know_who_runs() {
    [ -z "$root_mode" ] || return 0  # (known)
    local prompt='\u' field real
    # (bash knows both without a process: the user's name as a prompt's \u, which says "I have no name!" where the
    # user database does not know it, as id then fails; the effective group in /proc's Gid line)
    run_user=${prompt@P}
    while read -r field real run_group _; do
        [ "$field" != Gid: ] || break
    done </proc/self/status
    # (that sentence is translated: a name with a blank or a '!' is no user's)
    if [ "$field" != Gid: ] || [ -z "$run_user" ] || [[ "$run_user" == *[[:space:]!]* ]]; then
        run_user='' run_group=''
        return 0
    fi
    { read -r run_host </proc/sys/kernel/hostname; } 2>/dev/null || run_host=$(hostname)
    run_start=$(process_start $$)
    root_mode=$(stat -c %a "$root") || root_mode=''
}
# The first of the modules this one conflicts with (container_conflicts: their binds collide with its own) that is
# loaded: Lmod refuses this module after one of them, but not one of them after this module. In conflicting (no
# process: a wrapper asks at every start).
conflicting=''
conflicting_module_loaded() {
    local name conflict loaded=()
    IFS=: read -ra loaded <<<"${LOADEDMODULES:-}"
    for name in "${loaded[@]}"; do
        for conflict in "${conflicting_modules[@]}"; do
            if [ "$name" = "$conflict" ] || [ "${name#"$conflict"/}" != "$name" ]; then
                conflicting=$name
                return 0
            fi
        done
    done
    return 1
}
# The program libexec/$1 of this install into the variable $2, read once, at the command's start: its first line names
# the install it belongs to (install_stamp), so that one a reinstall wrote since this command started is refused, not
# run with this command's library
read_program() {
    local text=
    [ ! -f "$root/libexec/$1" ] || IFS= read -rd '' text <"$root/libexec/$1" || true
    [ "${text%%$'\n'*}" = "# install $install_stamp" ] ||
        die "$root/libexec/$1 is not of the install this command started with (reinstalled since?): run it again"
    printf -v "$2" '%s' "$text"
}
# The command's help ($command_help, set with $command_name), for -h and --help; and the command ends
print_help() {
    printf '%s\n' "${command_help[@]}"
    exit 0
}
# For a command that takes no arguments: -h or --help prints its help, any other argument stops it before anything
# is done
no_arguments() {
    answer_help "$@"
    [ "$#" -eq 0 ] ||
        die "$command_name takes no arguments, '$(printable "$1")' was given (usage: $command_name; -h says more)"
}
# -h or --help as the first argument: what this command does and takes, before anything is started
answer_help() {
    case "${1:-}" in
        -h | --help) print_help ;;
        *) ;;
    esac
}
