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
# Whether users other than you and root can rename or replace what you make in the directory $1: prints the first
# directory from $1 up to / that lets them (another user's, or writable for the group or for all without the sticky
# bit, as a project's directory on /scratch is), and how; prints nothing and fails where nobody can. A group counts
# unless it is your own primary group with no other members (a user's private group, as on LUMI). $2 "group": the
# group's members may, as you chose (umask 002): only a directory that all may write in counts. $1 is taken as it
# resolves (realpath), which is what the caller should use from then on.
others_can_replace_in() {
    local dir me dirs=() uid mode gid group i=0
    dir=$(realpath -e -- "$1" 2>/dev/null) || { echo "$1 (which cannot be resolved)"; return 0; }
    me=$(id -u)
    while dirs+=("$dir") && [ "$dir" != / ]; do
        dir=${dir%/*}
        dir=${dir:-/}
    done
    # (one stat for all, whose output holds no names: each line is the directory of the same index)
    while read -r uid mode gid group; do
        dir=${dirs[i]}
        i=$((i + 1))
        if [ "${2:-}" != group ] && [ "$uid" != 0 ] && [ "$uid" != "$me" ]; then
            echo "$dir (which is $(stat -c %U -- "$dir")'s)"
        elif (( 8#$mode & 8#1000 )); then
            continue  # sticky: only a name's owner, the directory's and root may rename it
        elif (( 8#$mode & 8#002 )); then
            echo "$dir (which all users may write in)"
        elif [ "${2:-}" != group ] && (( 8#$mode & 8#020 )) && ! group_is_only_yours "$gid"; then
            echo "$dir (which the group $group may write in, without the sticky bit)"
        else
            continue
        fi
        return 0
    done < <(stat -c '%u %a %g %G' -- "${dirs[@]}")
    return 1
}
# Whether the group $1 (a number) is your primary group and lists no other member (getent's fourth field)
group_is_only_yours() {
    local members
    [ "$1" = "$(id -g)" ] || return 1
    members=$(getent group "$1" | cut -d: -f4)
    [ -z "$members" ] || [ "$members" = "$(id -un)" ]
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
    local fields
    fields=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    read -ra fields <<<"${fields##*) }"
    echo "${fields[19]}"
}
run_record() {  # this run, as a record says it: "user host pid start"
    echo "$(id -un) $(hostname) $$ $(process_start $$)"
}
# The record $2 that a run wrote in the directory $1 it made: printed only if both are yours and real (a directory, a
# regular file, not links)
own_record() {
    [ ! -L "$1" ] && [ -d "$1" ] && [ -O "$1" ] || return 1
    [ ! -L "$1/$2" ] && [ -f "$1/$2" ] && [ -O "$1/$2" ] || return 1
    head -c 256 -- "$1/$2"
}
# Whether the directory $1 is one that an ended run of yours on this host made, by its own_record $2. (Earlier
# versions wrote "host pid start".)
left_by_an_ended_run() {
    local record user host pid start
    record=$(own_record "$1" "$2") || return 1
    read -r user host pid start <<<"$record" || return 1
    if [ -z "$start" ]; then
        start=$pid pid=$host host=$user user=$(id -un)
    fi
    [ "$user" = "$(id -un)" ] && [ "$host" = "$(hostname)" ] && [ "$(process_start "$pid")" != "$start" ]
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
