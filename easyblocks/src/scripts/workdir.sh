
# venv-pip's work dirs: private directories (0700) from mktemp, each with a record of the run that made it (its host,
# process and the process's start), by which a later run of the same user recognises what a killed one left behind:
# nothing is removed by its name alone. They are in the user's own group and not setgid: in a setgid directory (a
# project's TMPDIR) they would get the directory's group, which the runtime's user namespace does not map, and the
# overlay would not mount.
workdir_record=.venv-pip-run

process_start() {  # the start of process $1 (clock ticks since boot); nothing if it has ended
    local fields
    fields=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    read -ra fields <<<"${fields##*) }"
    echo "${fields[19]}"
}
this_run() {
    echo "$(hostname) $$ $(process_start $$)"
}
# Whether $1 is a work dir of yours, made by a run on this host that has ended: a real directory (not a link) with
# the record in it
left_by_an_ended_run() {
    local host pid start
    [ ! -L "$1" ] && [ -d "$1" ] && [ -O "$1" ] || return 1
    [ ! -L "$1/$workdir_record" ] && [ -f "$1/$workdir_record" ] && [ -O "$1/$workdir_record" ] || return 1
    read -r host pid start <"$1/$workdir_record" || return 1
    [ "$host" = "$(hostname)" ] && [ "$(process_start "$pid")" != "$start" ]
}
clean_workdir() {  # the work dir $1 with all in it: links in it are removed, never followed
    [ -n "${1:-}" ] && [ ! -L "$1" ] && [ -d "$1" ] || return 0
    # (the overlay's work directory is mode 000; $1 itself is 0700 and never changed)
    find -P "$1" -xdev -mindepth 1 -type d ! -perm -u=rwx -exec chmod u+rwx {} + 2>/dev/null || true
    rm -rf --one-file-system -- "$1"
}
remove_ended_runs() {  # in the place $1
    local old
    for old in "$1"/venv-pip.*; do
        if left_by_an_ended_run "$old"; then
            clean_workdir "$old"
        fi
    done
}
new_workdir() {  # in the place $1, into $work
    work=$(mktemp -d "$1/venv-pip.XXXXXX") || return 1
    if ! { chgrp "$(id -g)" "$work" && chmod g-s "$work" && this_run >"$work/$workdir_record"; }; then
        clean_workdir "$work"
        work=
        return 1
    fi
}
free_bytes() {
    df -B1 --output=avail "$1" 2>/dev/null | tail -n 1
}
# The places venv-pip works in, in order: $TMPDIR, /dev/shm, /tmp (node-local), then beside the install dir
workdir_places() {
    local place
    for place in "${TMPDIR:-}" /dev/shm /tmp; do
        [ -z "$place" ] || [ ! -d "$place" ] || [ ! -w "$place" ] || echo "$place"
    done
}
# A work dir with room for $1 bytes, into $work: in the first of workdir_places with room that is none of $2...
# (places where pip ran out of space); else beside the install dir, and says so. Removes what ended runs left there.
make_workdir() {
    local need=$1 place tried free places
    shift
    work=
    while read -r place; do
        for tried in "$@"; do
            [ ! "$place" -ef "$tried" ] || continue 2
        done
        remove_ended_runs "$place"
        free=$(free_bytes "$place")
        if [ "${free:-0}" -gt "$need" ] && new_workdir "$place"; then
            return 0
        fi
    done < <(workdir_places)
    for tried in "$@"; do
        [ ! "$root" -ef "$tried" ] ||
            die "pip ran out of space in $*; venv-pip works in the first of TMPDIR, /dev/shm and /tmp that has room" \
                "(then beside the install dir): set TMPDIR to a place with room for the change"
    done
    places=$(workdir_places)
    echo "${0##*/}: working in $root: none of ${places//$'\n'/, } has the $(( need >> 20 )) MiB free that it" \
        "needs${*:+ (pip ran out of space in $*)}; TMPDIR chooses where venv-pip works first" >&2
    remove_ended_runs "$root"
    new_workdir "$root" || die "cannot make a work directory in $root"
}
# Whether pip's failure in the work dir $1 was for want of space there: (nearly) nothing is free where it is
ran_out_of_space() {
    local free
    free=$(free_bytes "$1") || return 1
    [ "${free:-0}" -lt $(( 4 << 20 )) ]
}
# The place the work dir $1 is in
workdir_place() {
    dirname "$1"
}
# Stop with pip's status $1 in a container on the work dir, saying what failed and that $2 (what was not changed).
# 255 is the runtime's own: the container did not start (an overlay or a bind in the work dir did not mount).
stop_as_pip() {
    if [ "$1" -eq 255 ]; then
        echo "${0##*/}: error: the container did not start on the work dir $work (the runtime says why above);" \
            "$2. TMPDIR chooses where venv-pip works first: set it to another place to work there" >&2
    else
        echo "${0##*/}: error: pip failed (exit code $1); $2" >&2
    fi
    exit "$1"
}
