
# What venv-pip, make-squashfs and unmake-squashfs write is for everyone who may read the install dir (a project's
# shared install), whatever your umask: who that is, the install dir's own permissions say.
install_is_group_writable() {  # whether the install dir $1 is (a project's shared install)
    (( 8#$(stat -c %a "$1") & 8#020 ))
}
# The umask to write in the install dir $1 with: of yours only the write bits for group and others stay, the group's
# only where the install dir is not group-writable
shared_umask() {
    local umask
    # shellcheck disable=SC1102,SC2091  # @keeps@ is an octal number, filled at install
    umask=$(( $(umask) & @keeps@ ))
    if install_is_group_writable "$1"; then
        umask=$(( umask & ~8#020 ))
    fi
    printf '%04o\n' "$umask"
}
# The same for the files of yours in the tree $2 that you wrote with a tighter umask (pip in start-shell, say), for the
# install dir $1: before mksquashfs takes their modes, which nobody can change in the SquashFS file. Other members'
# are as they made them.
share_modes() {
    local executable=0555 readable=0444 modes=a+rX  # directories and executables, other files
    if install_is_group_writable "$1"; then
        executable=0575 readable=0464 modes=a+rX,g+w
    fi
    find "$2" -user "$(id -u)" ! -type l \( -perm -u+x ! -perm "-$executable" -o ! -perm "-$readable" \) \
        -exec chmod "$modes" {} +
}
