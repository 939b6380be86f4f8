
# What this writes is for everyone who may read the install dir (a project's shared install), whatever your umask:
# who that is, the install dir's own permissions say. Of your umask only the write bits for group and others stay,
# the group's only where the install dir is not group-writable.
group_writable=
# shellcheck disable=SC1102,SC2091  # @keeps@ is an octal number, filled at install
shared_umask=$(( $(umask) & @keeps@ ))
if (( 8#$(stat -c %a "$root") & 8#020 )); then
    group_writable=yes
    shared_umask=$(( shared_umask & ~8#020 ))
fi
umask "$(printf %04o "$shared_umask")"
# The same for the files of yours under $1 that you wrote with a tighter umask (pip in start-shell, say): before
# mksquashfs takes their modes, which nobody can change in the SquashFS file. Other members' are as they made them.
share_modes() {
    local executable=0555 readable=0444 modes=a+rX  # directories and executables, other files
    if [ -n "$group_writable" ]; then
        executable=0575 readable=0464 modes=a+rX,g+w
    fi
    find "$1" -user "$(id -u)" ! -type l \( -perm -u+x ! -perm "-$executable" -o ! -perm "-$readable" \) \
        -exec chmod "$modes" {} +
}