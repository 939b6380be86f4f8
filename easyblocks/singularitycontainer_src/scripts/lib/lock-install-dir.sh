
# The lock of the install dir $1 is $1/$lock_name, the record of its holder $1/$lock_record_name (with FILES).
# Nobody but the install's members may open the lock: flock works on a descriptor opened read-only, so a lock that
# others can read is one that others can hold. 0660 where the install dir is the group's (a project's shared
# install), else 0600; in the install dir's group.
lock_mode() {  # of the install dir $1, in mode
    if install_is_group_writable "$1"; then  # (readable-by-all.sh)
        mode=660
    else
        mode=600
    fi
}
# The new file $2 (this run's) of the install dir $1 gets the lock's mode $3 and the install dir's group; $4 "new": $2
# is as mktemp made it (0600, the group a setgid install dir gives), where nothing may need doing
make_private() {
    if [ "${4:-}" = new ] && [ "$3" = 600 ]; then
        return 0  # (nobody but its owner opens it: its group does not matter)
    fi
    chmod "$3" "$2" || return 1
    [ "${4:-}" != new ] || [ ! -g "$1" ] || return 0
    chgrp --reference="$1" "$2" 2>/dev/null || [ "$3" = 600 ]
}
# The lock file of the install dir $1, made with its mode $2 from the start: linked into place, so that it never
# replaces the one another run made meanwhile
make_lock() {
    local new
    new=$(new_private_file "$1" "$lock_name.new.") || { error "cannot write in $1"; return 1; }
    make_private "$1" "$new" "$2" new || { rm -f -- "$new"; error "cannot give $new the mode $2"; return 1; }
    ln -T -- "$new" "$1/$lock_name" 2>/dev/null || true  # (-T: never into a directory put there)
    rm -f -- "$new"
}
# The lock of the install dir $1 opened on descriptor 9 (made with the mode $2 if missing), only if it is a regular
# file: opening a FIFO would wait for a writer, forever. Status 1 (and why) where it cannot be.
open_lock() {
    local lock="$1/$lock_name" watchdog
    if [ ! -e "$lock" ] && [ ! -L "$lock" ]; then
        make_lock "$1" "$2" || return 1
    fi
    if ! lock_is_a_file "$lock"; then
        error "$lock is a $(stat -c '%F of %U' "$lock" 2>/dev/null || echo 'file that went away'), not the lock" \
            "file that venv-pip, make-squashfs and unmake-squashfs share: remove it (rm $lock), then try again"
        return 1
    fi
    # read-only, never made by the open (flock takes a read-only descriptor): a link put there since the check is
    # only read through, and take_lock holds it only once it is the file there, which no link is. A FIFO put there
    # since would keep the open waiting for a writer (bash opens without O_NONBLOCK): a watchdog ends the run then.
    watchdog=$(lock_open_watchdog "$lock" "$(stat -c %i -- "$lock")")
    if ! { exec 9<"$lock"; } 2>/dev/null; then
        stop_watchdog "$watchdog"
        error "cannot open $lock, the lock of this install dir; ask its owner, $(stat -c %U "$lock")"
        return 1
    fi
    stop_watchdog "$watchdog"
}
lock_is_a_file() {  # whether the lock $1 is a regular file (not a link)
    [ -f "$1" ] && [ ! -L "$1" ]
}
lock_open_seconds=10  # (an open of a regular file takes microseconds; on a busy Lustre, seconds)
# A process (its pid) that ends this run, saying why, unless stop_watchdog stops it: every lock_open_seconds it looks
# whether the open of the lock $1 (the file of inode $2, as checked) waits on a FIFO that another user put in its
# place (the run waits for a FIFO's writer, or the name is no longer that file); a slow open of the file itself it
# leaves alone. TERM, then KILL (a run started with TERM ignored cannot trap it). A session of its own, whose
# processes stop_watchdog ends together (a sleep left behind would hold the caller's output for as long).
lock_open_watchdog() {
    # shellcheck disable=SC2154  # (command_name: the command's, set before it sources the library)
    local why="$command_name: error: $1 is no longer the lock file (a FIFO, put in its place while it was opened, keeps"
    why+=" the open waiting): remove it (rm $1), then try again"
    # shellcheck disable=SC2016  # (expanded by the watchdog's bash)
    setsid bash -c '
        while sleep "$1"; do
            if grep -qs -e fifo -e wait_for_partner "/proc/$4/wchan" || [ ! -f "$2" ] || [ -L "$2" ] ||
                [ "$(stat -c %i -- "$2" 2>/dev/null)" != "$3" ]; then
                echo "$5" >&2
                kill -TERM "$4" 2>/dev/null && sleep 2 && kill -KILL "$4" 2>/dev/null
                exit 0
            fi
        done' watchdog "$lock_open_seconds" "$1" "$2" "$$" "$why" </dev/null >/dev/null 9>&- &
    echo "$!"
}
stop_watchdog() {  # the watchdog $1 (lock_open_watchdog), with its sleep; before its setsid, itself
    kill -TERM -- "-$1" 2>/dev/null || kill -TERM "$1" 2>/dev/null || true
}
# The lock (descriptor 9) of the install dir $1 gets its mode $2 and group from its owner. One that others could open
# (earlier versions made it 0644) may be open for one of them already: whoever holds it puts a new one of their own in
# its place, holding both. $3: the lock's mode and group now, $4 the install dir's group (take_lock's one stat).
keep_lock_private() {
    local mode=$2 now=${3% *} new
    if [ "$now" = "$mode" ] && { [ "$mode" = 600 ] || [ "${3#* }" = "$4" ]; }; then
        return 0
    fi
    if [ -O /dev/fd/9 ] && (( (8#$now & 8#007) == 0 )); then
        make_private "$1" /dev/fd/9 "$mode" && return 0
    fi
    new=$(new_private_file "$1" "$lock_name.new.") || { error "cannot write in $1"; return 1; }
    if ! { make_private "$1" "$new" "$mode" new && exec 8<>"$new" && flock -n 8 &&
        rename_into_place "$new" "$1/$lock_name"; }
    then
        rm -f -- "$new"
        error "cannot replace $1/$lock_name, which others can open, with a private one"
        return 1
    fi
    exec 9>&8 8>&-
}
# The holder's record beside the lock of the install dir $1 ("user host pid command"), with the lock's mode $2, for
# those who wait or are refused: written by each one that takes the lock, as a new file renamed into place
note_lock_holder() {
    local new
    new=$(new_private_file "$1" "$lock_record_name.new.") || return 0
    if echo "${run_user:-$(id -un)} ${run_host:-$(hostname)} $$ ${0##*/}" >"$new" &&
        make_private "$1" "$new" "$2" new; then
        rename_into_place "$new" "$1/$lock_record_name" && return 0
    fi
    rm -f -- "$new"
}
# What a run killed between its mktemp and its rename left beside the lock of the install dir $1 (also the install's
# Python lock): new files of yours, regular and not links, more than $keep_minutes minutes old (a run that is making
# one now is milliseconds from its rename)
remove_lock_leftovers() {
    local old
    for old in "$1/$lock_name.new."* "$1/$lock_record_name.new."*; do
        if [ ! -L "$old" ] && [ -f "$old" ] && [ -O "$old" ] && older_than "$old" "$keep_minutes"; then
            rm -f -- "$old"
        fi
    done
}
# Who holds the lock of the install dir $1, from the record: "lumi-owner's venv-pip on nid001 (process 123)". One who
# takes the lock writes its record just after: a record that names a process that has ended here is read again for
# up to a second before it is taken for the last word.
lock_holder() {
    local record="$1/$lock_record_name" who host pid what tries=10
    while :; do
        if ! { [ -f "$record" ] && [ ! -L "$record" ] &&
            read -r who host pid what < <(timeout 2 head -c 256 -- "$record" 2>/dev/null) && [ -n "$what" ] &&
            [[ $pid =~ ^[0-9]+$ ]]; }; then
            echo "another venv-pip, make-squashfs, unmake-squashfs or eb reinstall"
            return
        fi
        if [ "$host" != "${run_host:-$(hostname)}" ] || [ -n "$(process_start "$pid")" ] || (( --tries == 0 ))
        then
            break
        fi
        sleep 0.1
    done
    echo -n "$(printable "$who")'s $(printable "$what") on $(printable "$host") (process $pid"
    [ "$tries" -gt 0 ] || echo -n ", which has ended: who holds the lock now is not known"
    echo ")"
}
# A lock of the install dir $1 that others can open (as earlier versions made it) may be held by anyone: what to do
lock_hint() {
    local lock="$1/$lock_name"
    if [ -f "$lock" ] && (( 8#$(stat -c %a "$lock") & 8#006 )); then
        echo "; $lock is one that users outside the project can open (as earlier versions made it): if no one of" \
            "the project is changing $1, remove it, then try again"
    fi
}
# The lock of the install dir $1 on descriptor 9, with flock's options $2... (-n: status 1 at once if it is taken).
# It counts when it is the file that is there now, not a link to one (a reinstall replaces it with the install dir).
# Status 2 (and why) where it cannot be taken.
take_lock() {
    local root=$1 mode held
    shift
    if [ ! -w "$root" ]; then
        # shellcheck disable=SC2154  # command_name: the command's, set before it sources the library
        error "$root is not writable for you: only whoever installed the module can change it$(
            [ "$command_name" != venv-pip ] || echo "; venv-pip install --user adds packages for you alone")"
        return 2
    fi
    command -v flock >/dev/null || { error "flock not found on PATH (it comes with util-linux)"; return 2; }
    lock_mode "$root"
    while :; do
        open_lock "$root" "$mode" || return 2
        if [ ! -f /dev/fd/9 ]; then
            error "$root/$lock_name was replaced by something that is not a file while it was opened; remove it"
            return 2
        fi
        flock "$@" 9 || return 1
        # (in one process: the descriptor's file (stat's - is its standard input), the name's own inode in one lstat
        # (a link there, or swapped in and out between two checks, is not it), and the install dir's group)
        held=()
        mapfile -t held < <(stat -c '%d:%i %a %g' -- - "$root/$lock_name" "$root/." <&9 2>/dev/null)
        if [ "${#held[@]}" -eq 3 ] && [ "${held[0]%% *}" = "${held[1]%% *}" ]; then
            keep_lock_private "$root" "$mode" "${held[0]#* }" "${held[2]##* }" || return 2
            note_lock_holder "$root" "$mode"
            remove_lock_leftovers "$root"
            return 0
        fi
    done
}
lock_refusal() {  # what to say when another run holds the lock of the install dir $1
    echo "$(lock_holder "$1") is changing $1; try again when it is done$(lock_hint "$1")"
}
wait_for_lock() {  # take_lock of the install dir $1, saying once for whom it waits: its status
    local status=0
    take_lock "$1" -n || status=$?
    [ "$status" -eq 1 ] || return "$status"
    echo "${0##*/}: waiting for $(lock_holder "$1") to finish with $1...$(lock_hint "$1")" >&2
    take_lock "$1"
}
# The lock of the install dir $1 at once, or status 1 where another run holds it; nothing to take where the install
# that runs this holds it (the variable $holds_lock_var names its install dir: the make-squashfs of an install)
take_lock_now() {
    [ "${!holds_lock_var:-}" = "$1" ] || take_lock "$1" -n
}
