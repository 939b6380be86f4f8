# The runtime's file handling (docs/design.md),
# for every command that writes where others may write too: a project's install dir, TMPDIR, /dev/shm, /tmp, a Jupyter
# prefix. A new file or directory gets its name from mktemp (random, made exclusively) in the directory it belongs in,
# stays private (0600, 0700) until it is whole, and is renamed into place. Nothing is written, chmod-ed or removed
# through a name that the command did not make: no link is followed, no FIFO opened, and what a killed run left is
# known by the record the run wrote into it, never by its name. Each function takes what it works on as arguments and
# prints its result.

new_private_dir() {  # a new directory $1/$2XXXXXX (0700): its path
    mktemp -d -- "$1/$2XXXXXX"
}
new_private_file() {  # a new, empty file $1/$2XXXXXX (0600): its path
    mktemp -- "$1/$2XXXXXX"
}
new_link() {  # a new symbolic link to $1 at a fresh name $2/$3XXXXXX: its path
    local link
    link=$(mktemp -u -- "$2/$3XXXXXX") || return 1
    ln -sT -- "$1" "$link" || return 1  # (symlink(2) makes the name or fails: no one else's is used)
    echo "$link"
}
# Whether users other than you and root can rename or replace what you make in the directory $1, as the kernel decides
# it: prints the first directory from $1 up to / that lets them (another user's; or one without the sticky bit that
# all may write in, that its group may write in, or that its POSIX ACL lets a named user or group write in, as a
# project's directory on /scratch), and how; prints nothing and fails where nobody can. A group counts unless it is
# your own primary group and nobody else's (group_is_only_yours: a user's private group, as on LUMI). Where it cannot
# tell (an ACL that cannot be read), it counts. $2 "group": the group's members may, as you chose (umask 002): only
# others than the directory's group count. $1 is taken as it resolves (realpath), which is what the caller should use
# from then on.
others_can_replace_in() {
    replace_check "$@" || return 1
    echo "$replace_why"
}
# others_can_replace_in without a process to tell it: status 0 where others can, with the answer in replace_why; the
# directory as it resolves in replace_dir
# shellcheck disable=SC2034  # replace_dir: read by workdir.sh
replace_why='' replace_dir=''
# shellcheck disable=SC2034  # (the same)
replace_check() {
    local dir me dirs=() uid mode gid group i=0 why
    replace_why='' replace_dir=''
    dir=$1
    if ! resolves_to_itself "$dir"; then
        dir=$(realpath -e -- "$1" 2>/dev/null) || { replace_why="$1 (which cannot be resolved)"; return 0; }
    fi
    replace_dir=$dir
    me=$EUID
    while dirs+=("$dir") && [ "$dir" != / ]; do
        dir=${dir%/*}
        dir=${dir:-/}
    done
    # (one stat for all, whose output holds no names: each line is the directory of the same index)
    while read -r uid mode gid group; do
        dir=${dirs[i]}
        i=$((i + 1))
        if [ "${2:-}" != group ] && [ "$uid" != 0 ] && [ "$uid" != "$me" ]; then
            replace_why="$dir (which is $(stat -c %U -- "$dir")'s)"
        elif (( 8#$mode & 8#1000 )); then
            continue  # sticky: only a name's owner, the directory's and root may rename it
        elif (( 8#$mode & 8#002 )); then
            replace_why="$dir (which all users may write in)"
        elif ! (( 8#$mode & 8#020 )); then
            continue  # (with an ACL these bits are its mask: no named user or group may write either)
        elif why=$(group_class_writers "$dir" "$gid" "$group" "${2:-}"); then
            replace_why="$dir ($why, without the sticky bit)"
        else
            continue
        fi
        return 0
    done < <(stat -c '%u %a %g %G' -- "${dirs[@]}")
    return 1
}
# Whether the path $1 is what realpath -e makes of it, as bash's tests tell (no process): absolute, there, and no ., ..,
# // or link in it
resolves_to_itself() {
    local part=$1
    case "$1/" in
        //) return 0 ;;
        //* | *//* | */./* | */../*) return 1 ;;
        /*) [ -e "$1" ] || return 1 ;;
        *) return 1 ;;
    esac
    while [ -n "$part" ]; do
        [ ! -L "$part" ] || return 1
        part=${part%/*}
    done
}
# Whether the group class of the directory $1 (the group $2, named $3; $4 as others_can_replace_in's $2), which its
# mode lets write, lets others than you and root write: its group, where that is not group_is_only_yours, or, where
# it has a POSIX ACL, what the mask leaves of the group's entry and of those of named users and groups. Says who. An
# ACL that cannot be read counts (getfacl is in Debian's and SUSE's acl package).
group_class_writers() {
    local acl='' unread='' tag id perms mask=w group_writes=w who='' marker
    if ! command -v getfacl >/dev/null || ! acl=$(getfacl -cn -- "$1" 2>/dev/null); then
        # (without getfacl: ls marks a POSIX ACL with '+' after the mode, in the 11th column of its line, and puts
        # ' ' or '.' (an SELinux context) there where there is none: then the mode's group bits are all)
        # shellcheck disable=SC2012  # (its fixed columns, not a name)
        marker=$(ls -ld -- "$1" 2>/dev/null | cut -c 11)
        acl=''
        [ "$marker" = ' ' ] || [ "$marker" = . ] || unread=yes
    fi
    while IFS=: read -r tag id perms; do
        case "$tag:$id" in
            mask:) mask=${perms:1:1} ;;
            group:) group_writes=${perms:1:1} ;;
        esac
    done <<<"$acl"
    [ "$mask" = w ] || return 1
    if [ "$group_writes" = w ] && [ "$4" != group ] && ! group_is_only_yours "$2"; then
        echo "which the group $3 may write in"
        return 0
    fi
    while IFS=: read -r tag id perms; do
        if [ -z "$id" ] || [ "${perms:1:1}" != w ]; then
            continue
        fi
        case "$tag" in
            user) [ "$id" = 0 ] || [ "$id" = "$EUID" ] || who="the user $(id_name passwd "$id")" ;;
            group)
                if { [ "$4" != group ] || [ "$id" != "$2" ]; } && ! group_is_only_yours "$id"; then
                    who="the group $(id_name group "$id")"
                fi
                ;;
        esac
        if [ -n "$who" ]; then
            echo "whose ACL lets $who write in it"
            return 0
        fi
    done <<<"$acl"
    [ -n "$unread" ] || return 1
    echo "whose ACL cannot be read here (getfacl, of the acl package)"
}
id_name() {  # the name of the user or group ($1: passwd or group) of the number $2, else the number
    local name
    name=$(getent "$1" "$2" | cut -d: -f1)
    echo "${name:-$2}"
}
# Whether the group $1 (a number) is your primary group and nobody else's: it lists no other member (getent's fourth
# field), and no other user the user database lists has it as their primary group
group_is_only_yours() {
    local members
    [ "$1" = "${run_group:-$(id -g)}" ] || return 1
    members=$(getent group "$1" | cut -d: -f4)
    [ -z "$members" ] || [ "$members" = "${run_user:-$(id -un)}" ] || return 1
    [ -z "$(getent passwd |
        awk -F: -v gid="$1" -v me="${run_user:-$(id -un)}" '$4 == gid && $1 != me { print; exit }')" ]
}
# The text $1 with what a terminal would not print (escape sequences, newlines) as '?': for what others wrote
printable() {
    local text=$1
    echo "${text//[![:print:]]/?}"
}
umask_mode() {  # the mode that the umask leaves of the mode $1 (777 for a directory, 666 for a file), as chmod takes it
    printf '%04o\n' $(( 8#$1 & ~8#$(umask) ))
}
# The new file or directory $1 (this run's, from mktemp) renamed to $2; a link or a file at $2 is replaced, never
# written through. On failure $1 is removed.
rename_into_place() {
    mv -fT -- "$1" "$2" && return 0
    rm -rf -- "$1"
    return 1
}
process_start() {  # the start of process $1 (clock ticks since boot); nothing if it has ended
    local fields=
    # (whole, with read, not a cat: the process's name may hold a newline)
    { IFS= read -r -d '' fields <"/proc/$1/stat"; } 2>/dev/null || true
    [ -n "$fields" ] || return 0
    read -ra fields <<<"${fields##*) }"
    echo "${fields[19]}"
}
run_record() {  # this run, as a record says it: "user host pid start"
    echo "${run_user:-$(id -un)} ${run_host:-$(hostname)} $$ ${run_start:-$(process_start $$)}"
}
# The record $2 that a run wrote in the directory $1 it made, in own: only if both are yours and real (a directory, a
# regular file, not links). (No process: it is asked of every work dir in /dev/shm and /tmp, other users' too.)
own=''
own_record() {
    own=''
    [ ! -L "$1" ] && [ -d "$1" ] && [ -O "$1" ] || return 1
    [ ! -L "$1/$2" ] && [ -f "$1/$2" ] && [ -O "$1/$2" ] || return 1
    read_start own "$1/$2" 256
}
# Whether the directory $1 is one that an ended run of yours on this host made, by its own_record $2. (Earlier
# versions wrote "host pid start".)
left_by_an_ended_run() {
    local user host pid start
    own_record "$1" "$2" || return 1
    read -r user host pid start <<<"$own" || return 1
    if [ -z "$start" ]; then
        start=$pid pid=$host host=$user user=${run_user:-$(id -un)}
    fi
    [ "$user" = "${run_user:-$(id -un)}" ] && [ "$host" = "${run_host:-$(hostname)}" ] &&
        [ "$(process_start "$pid")" != "$start" ]
}
older_than() {  # whether the file $1 (not followed if a link) was last changed more than $2 minutes ago
    [ -n "$(find "$1" -maxdepth 0 -mmin "+$2" 2>/dev/null)" ]
}
# The directory $1 of this run, with all in it: links in it are removed, never followed, nothing on another file
# system is entered. Not a directory (or nothing at all): nothing is done.
remove_own_tree() {
    [ -n "${1:-}" ] && [ ! -L "$1" ] && [ -d "$1" ] || return 0
    # (a directory of it may lack u+rwx, e.g. an overlay's work directory: $1 itself is not changed)
    find -P "$1" -xdev -mindepth 1 -type d ! -perm -u=rwx -exec chmod u+rwx {} + 2>/dev/null || true
    rm -rf --one-file-system -- "$1"
}
