# The install dir this script lives in (module loaded or not), and its venv (STATE)
root=$(readlink -f "${BASH_SOURCE[0]}")
root=${root%/*/*}
dir="$root/@us_dir@"
packed="$root/@packed@"  # (the link, see STATE)
squashfs_name=@us_squashfs@ changes_name=@us_changes@  # (the files of a generation)
@venv_state@
# The state now: the files of the packed venv (which may not exist), for reading. What changes the venv reads it again
# once it holds the lock (read_state).
# shellcheck disable=SC2034  # (each script that includes this reads what it needs of them)
read_state() {
    generation=$(current_generation "$root")
    squashfs="${generation:-$packed}/$squashfs_name"
    changes="${generation:-$packed}/$changes_name"
    form=$(venv_form "$root" "$generation")
}
read_state
