# The cache root.
# singularitycontainer_cache_root [-q] PARENT MODULE SUBDIR...: PARENT/<user>-caches, -<job>-<node> in a job, private
# to the user, else a fresh private one beside it (said in the name of MODULE). Prints it, with the subdirectories made
# in it (0700). With -q first, a fresh one made before is taken again without a word (the wrappers and run scripts, at
# each start).
singularitycontainer_cache_root() {
    __sc_quiet=
    if [ "${1:-}" = -q ]; then
        __sc_quiet=yes
        shift
    fi
    __sc_parent=$1 __sc_module=$2
    shift 2
    __sc_user=${USER:-${LOGNAME:-$(id -un 2>/dev/null || id -u)}}
    __sc_named=$__sc_parent/$__sc_user-caches${SLURM_JOB_ID:+-$SLURM_JOB_ID-${SLURM_NODEID:-0}}
    __sc_root=$__sc_named
    case ${SINGULARITYCONTAINER_CACHE_ROOT:-} in
        "$__sc_named".??????) __sc_root=$SINGULARITYCONTAINER_CACHE_ROOT ;;
    esac
    __sc_why=
    if [ -d "$__sc_root" ] && [ ! -L "$__sc_root" ] || ! mkdir -m 0700 -- "$__sc_root" 2>/dev/null; then
        __sc_why=$(singularitycontainer_cache_refusal "$__sc_root")
    fi
    if [ -n "$__sc_why" ]; then
        for __sc_fresh in "$__sc_named".??????; do  # one made before (a new shell, another module)
            if [ -O "$__sc_fresh" ] && [ -z "$(singularitycontainer_cache_refusal "$__sc_fresh")" ]; then
                break
            fi
            __sc_fresh=
        done
        __sc_made=
        if [ -z "$__sc_fresh" ]; then
            if ! __sc_fresh=$(mktemp -d "$__sc_named.XXXXXX" 2>/dev/null); then
                echo "$__sc_module: caches: not using $__sc_root, which $__sc_why, and no private directory can" \
                    "be made beside it: the caches are left where the tools put them" >&2
                unset __sc_user __sc_named __sc_root __sc_why __sc_fresh __sc_made __sc_quiet __sc_parent __sc_module \
                    __sc_me
                return 1
            fi
            __sc_made=yes
        fi
        # Said at each load; by the wrappers and run scripts (every command, every rank) only when they make it
        if [ -n "$__sc_made" ] || [ -z "$__sc_quiet" ]; then
            echo "$__sc_module: caches: not using $__sc_root, which $__sc_why; using $__sc_fresh instead" >&2
        fi
        __sc_root=$__sc_fresh
    fi
    for __sc_sub; do
        shift
        [ -d "$__sc_root/$__sc_sub" ] || set -- "$@" "$__sc_root/$__sc_sub"
    done
    if [ "$#" -gt 0 ]; then
        mkdir -m 0700 -- "$@" 2>/dev/null || :  # ranks starting together make them at once
    fi
    echo "$__sc_root"
    unset __sc_user __sc_named __sc_root __sc_why __sc_fresh __sc_sub __sc_made __sc_quiet __sc_parent __sc_module \
        __sc_me
}
# Why $1 cannot be the cache root; nothing if it is a real directory of the user's that nobody else can write
# (then made 0700, if an earlier version left it readable by others)
singularitycontainer_cache_refusal() {
    if [ -L "$1" ]; then
        echo "is a symbolic link"
    elif [ ! -e "$1" ]; then
        echo "cannot be made"
    elif [ ! -d "$1" ]; then
        echo "is not a directory"
    else
        # (the entry's owner and mode in one look that follows no link: someone else's entry may be swapped for a link
        # to one of the user's own directories between two looks; one of the user's own nobody else can swap in /tmp)
        # shellcheck disable=SC3028  # (bash's EUID: no process; another sh asks id)
        __sc_me=${EUID:-$(id -u)}
        stat -c '%u %A %U' -- "$1" 2>/dev/null | {
            if ! read -r __sc_uid __sc_mode __sc_owner; then
                echo "cannot be read"
            elif [ "$__sc_uid" != "$__sc_me" ]; then
                echo "is owned by $__sc_owner"
            else
                case $__sc_mode in
                    drwx------*) ;;
                    d????[!w]??[!w]*) chmod 0700 -- "$1" ;;
                    *) echo "is writable by others" ;;
                esac
            fi
        }
    fi
}