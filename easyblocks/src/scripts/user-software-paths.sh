# The install dir this script lives in (module loaded or not), and its venv (STATE)
root=$(readlink -f "${BASH_SOURCE[0]}")
root=${root%/*/*}
dir="$root/@us_dir@"
packed="$root/@packed@"  # (the link, see STATE)
@venv_state@
# The state now: the files of the packed venv (which may not exist), for reading. What changes the venv reads it again
# once it holds the lock (read_state).
read_state() {
    generation=$(current_generation "$root")
    squashfs="${generation:-$root/@packed@}/@us_squashfs@"
    changes="${generation:-$root/@packed@}/@us_changes@"
    form=$(venv_form "$root" "$generation")
}
read_state
