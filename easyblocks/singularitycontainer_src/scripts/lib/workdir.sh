
# venv-pip's work dirs (with FILES): private directories from mktemp, each with the record of the run that made it, by
# which a later run of the same user removes what a killed one left behind. They are in the user's own group and not
# setgid: in a setgid directory (a project's TMPDIR) they would get the directory's group, which the runtime's user
# namespace does not map, and the overlay would not mount.
workdir_record=.venv-pip-run  # (this fragment's own constant, as are the names below)
workdir_prefix='venv-pip.'
workdir_tmp=tmp  # (in a work dir: the temporary directory of what the change starts, use_workdir_tmp)
caller_tmpdir=${TMPDIR:-}  # (the caller's TMPDIR: where a work dir may go; the processes get the work dir's)

remove_ended_runs() {  # in the place $1
    local old
    for old in "$1/$workdir_prefix"*; do
        if left_by_an_ended_run "$old" "$workdir_record"; then
            remove_own_tree "$old"
        fi
    done
}
# The work dirs of this run in the places and beside the install dir $1: as it ends, also one that a signal left
# between its making and its name reaching the script
# shellcheck disable=SC2154  # own: own_record's (files.sh)
remove_workdirs_of_this_run() {
    local place old this
    this=$(run_record)
    while read -r place; do
        for old in "$place/$workdir_prefix"*; do
            if own_record "$old" "$workdir_record" && [ "$own" = "$this" ]; then
                remove_own_tree "$old"
            fi
        done
    done < <(workdir_places; echo "$1")
}
new_workdir() {  # a new work dir in the place $1: its path
    local work
    work=$(new_private_dir "$1" "$workdir_prefix") || return 1
    # (only a setgid place gives it a group and a mode of its own)
    if ! { { [ ! -g "$1" ] || { chgrp "${run_group:-$(id -g)}" "$work" && chmod g-s "$work"; }; } &&
        run_record >"$work/$workdir_record" && mkdir "$work/$workdir_tmp"; }; then
        remove_own_tree "$work"
        return 1
    fi
    echo "$work"
}
# Every process that the change starts in the work dir $1 (the runtime, pip in the container and the builds it runs,
# mksquashfs, sort) keeps its temporary files in the work dir's private temporary directory: TMPDIR, which the
# container gets (in_container binds it), never the caller's, where others may rename what pip makes (a project's
# TMPDIR). pip's own settings that would send them elsewhere go.
use_workdir_tmp() {
    export TMPDIR="$1/$workdir_tmp"
    unset PIP_BUILD_TRACKER
}
# pip's cache (PIP_CACHE_DIR, else pip's in XDG_CACHE_HOME or ~/.cache) only where no other user can rename or replace
# what pip keeps there (its nearest directory that exists, and up: others_can_replace_in): a wheel planted there would
# go into the venv. Elsewhere it is off for this run, which says so in one line.
# shellcheck disable=SC2154  # replace_why: replace_check's (files.sh)
use_private_pip_cache() {
    local cache=${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/}/.cache}/pip} existing
    [ -z "${PIP_NO_CACHE_DIR:-}" ] || return 0
    existing=$cache
    while [ ! -e "$existing" ] && [ "$existing" != "${existing%/*}" ]; do
        existing=${existing%/*}
    done
    if replace_check "${existing:-/}"; then
        echo "${0##*/}: not using pip's cache in $cache: other users can rename or replace what pip keeps in" \
            "$replace_why" >&2
        export PIP_NO_CACHE_DIR=1
    fi
}
free_bytes() {  # what is free where the path $1 is (for you: not the blocks kept for root)
    local blocks size
    read -r blocks size < <(stat -f -c '%a %S' -- "$1" 2>/dev/null) && echo $(( blocks * size ))
}
# The places venv-pip works in, in order: $TMPDIR, /dev/shm, /tmp (node-local), as they resolve, where you may write
# and nobody else can rename or replace what you make (not a project's TMPDIR on /scratch, which has no sticky bit:
# a member could swap your work dir for theirs); then beside the install dir
workdir_candidates() {
    local place
    for place in "$caller_tmpdir" /dev/shm /tmp; do
        [ -z "$place" ] || [ ! -d "$place" ] || [ ! -w "$place" ] || echo "$place"
    done
}
workdir_places() {  # (not one whose path has a ',' or a ':': the runtime's bind and overlay lists cannot hold it)
    [ -n "$known_places" ] || know_workdir_places
    printf '%s' "${known_places#-}"
}
say_where_others_can_replace() {  # the candidates that are not places, and why (once a run, before make_workdir)
    [ -n "$known_places" ] || know_workdir_places
    printf '%s' "$place_refusals" >&2
}
# The places and the refusals, found once: in the command's own shell (say_where_others_can_replace, first) for the rest
# of the run (each place costs a few processes), which then sees them as they were at its start; in a subshell, for
# that subshell only
known_places='' place_refusals=''
# shellcheck disable=SC2154  # replace_why, replace_dir: replace_check's (files.sh)
know_workdir_places() {
    local place
    while read -r place; do
        if replace_check "$place"; then
            place_refusals+="${0##*/}: not working in $place: other users can rename or replace what you make in"
            place_refusals+=" $replace_why"$'\n'
        elif [[ "$replace_dir" != *[,:]* ]]; then
            known_places+=$replace_dir$'\n'
        fi
    done < <(workdir_candidates)
    known_places=-$known_places  # (known, if empty)
}
# A new work dir with room for $2 bytes (its path): in the first of workdir_places with room that is none of $3...
# (places where pip ran out of space), else in the install dir $1, saying so; status 1 (and why) where there is none.
# Removes what ended runs left there.
make_workdir() {
    local root=$1 need=$2 place tried free places
    shift 2
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
        if [ "$root" -ef "$tried" ]; then
            error "pip ran out of space in $*; venv-pip works in the first of TMPDIR, /dev/shm and /tmp that has" \
                "room (then beside the install dir): set TMPDIR to a place with room for the change"
            return 1
        fi
    done
    places=$(workdir_places)
    echo "${0##*/}: working in $root: none of ${places//$'\n'/, } has the $(( need >> 20 )) MiB free that it" \
        "needs${*:+ (pip ran out of space in $*)}; TMPDIR chooses where venv-pip works first" >&2
    remove_ended_runs "$root"
    new_workdir "$root" || { error "cannot make a work directory in $root"; return 1; }
}
# Whether pip's failure in the work dir $1 was for want of space there: (nearly) nothing is free where it is
ran_out_of_space() {
    local free
    free=$(free_bytes "$1") || return 1
    [ "${free:-0}" -lt $(( 4 << 20 )) ]
}
# Say what failed where pip's status in a container on the work dir $2 is $1, and that $3 (what was not changed).
# 255 is the runtime's own when the container does not start (an overlay or a bind in the work dir did not mount),
# and also its status for a command not found in the container: the command $4... (the same container with `true`)
# tells which.
say_why_pip_failed() {
    local status=$1 work=$2 unchanged=$3
    shift 3
    if [ "$status" -eq 255 ] && ! "$@" >/dev/null 2>&1 9>&-; then
        error "the container did not start on the work dir $work (the runtime says why above); $unchanged." \
            "TMPDIR chooses where venv-pip works first: set it to another place to work there"
    elif [ "$status" -eq 255 ]; then
        error "the container starts, but the command in it ended with exit code 255, the runtime's status for a" \
            "command it did not find there (the runtime says which above); $unchanged"
    else
        error "pip failed (exit code $status); $unchanged"
    fi
}
