# The modes of what venv-pip, make-squashfs and unmake-squashfs write:
# the install's row in README's trust table, whatever your umask (000, 002, 022, 077): readable for everyone who may
# read the install dir, never writable by others, writable by the group only in a group install. So do the processes
# they start (pip in the container, mksquashfs, unsquashfs), which take the umask.
# shellcheck disable=SC2154  # root, root_mode: the library's (user-software-paths.sh, library.sh)
install_is_group_writable() {  # whether the install dir $1 is (a project's shared install)
    local mode=$root_mode  # (this install's, as know_who_runs found it)
    [ "$1" = "$root" ] && [ -n "$mode" ] || mode=$(stat -c %a "$1")
    (( 8#$mode & 8#020 ))
}
use_shared_umask() {  # the umask to write in the install dir $1 with, set
    if install_is_group_writable "$1"; then
        umask "$group_install_umask"
    else
        umask "$install_umask"
    fi
}
# The same modes for the files of yours in the tree $2 that were written with another umask (pip in start-shell under
# a tighter or a looser one, say), for the install dir $1: before mksquashfs takes their modes, which nobody can change
# in the SquashFS file. Other members' are as they made them.
share_modes() {
    local executable=0555 readable=0444 forbidden=022 modes=a+rX,go-w  # directories and executables, other files
    if install_is_group_writable "$1"; then
        executable=0575 readable=0464 forbidden=002 modes=a+rX,g+w,o-w
    fi
    find "$2" -user "$EUID" ! -type l \( -perm -u+x ! -perm "-$executable" -o ! -perm "-$readable" -o \
        -perm "/$forbidden" \) -exec chmod "$modes" {} +
}
# The mode and group of the file $1 for the new file $2, less the write bits that the install dir $3 forbids
like() {
    chmod --reference="$1" "$2" && chmod "$(install_is_group_writable "$3" && echo o-w || echo go-w)" "$2"
    chgrp --reference="$1" "$2" 2>/dev/null || true
}
