[ -w "$root" ] ||
    die "$root is not writable for you: only whoever installed the module can change it"
command -v flock >/dev/null || die "flock not found on PATH (it comes with util-linux)"
lock="$root/@lock@"
lock_record="$root/@lock_record@"
# Nobody but the install's members may open the lock: flock works on a descriptor opened read-only, so a lock that
# others can read is one that others can hold. 0660 where the install dir is the group's (a project's shared
# install), else 0600; in the install dir's group.
lock_mode() {
    if (( 8#$(stat -L -c %a "$1") & 8#020 )); then
        echo 660
    else
        echo 600
    fi
}
# A new file $1 (a name from mktemp) gets the lock's mode $2 and the install dir's group
make_private() {
    chmod "$2" "$1" || return 1
    chgrp --reference="$root" "$1" 2>/dev/null || [ "$2" = 600 ]
}
# The lock file, made with its mode from the start: linked into place, so that it never replaces the one another run
# made meanwhile
make_lock() {
    local new
    new=$(mktemp "$lock.new.XXXXXX") || die "cannot write in $root"
    make_private "$new" "$1" || { rm -f "$new"; die "cannot give $new the mode $1"; }
    ln "$new" "$lock" 2>/dev/null || true
    rm -f "$new"
}
# Opened only if it is a regular file: opening a FIFO would wait for a writer, forever
open_lock() {
    if [ ! -e "$lock" ] && [ ! -L "$lock" ]; then
        make_lock "$1"
    fi
    if [ ! -f "$lock" ] || [ -L "$lock" ]; then
        die "$lock is a $(stat -c '%F of %U' "$lock" 2>/dev/null || echo 'file that went away'), not the lock file" \
            "that venv-pip, make-squashfs and unmake-squashfs share: remove it (rm $lock), then try again"
    fi
    { exec 9<>"$lock"; } 2>/dev/null || { exec 9<"$lock"; } 2>/dev/null ||
        die "cannot open $lock, the lock of this install dir; ask its owner, $(stat -c %U "$lock")"
}
# The lock gets its mode and group from its owner. One that others could open (earlier versions made it 0644) may be
# open for one of them already: whoever holds it puts a new one of their own in its place, holding both.
keep_lock_private() {
    local mode=$1 now new
    now=$(stat -L -c %a /dev/fd/9)
    if [ "$now" = "$mode" ] &&
        { [ "$mode" = 600 ] || [ "$(stat -L -c %g /dev/fd/9)" = "$(stat -L -c %g "$root")" ]; }; then
        return 0
    fi
    if [ -O /dev/fd/9 ] && (( (8#$now & 8#007) == 0 )); then
        make_private /dev/fd/9 "$mode" && return 0
    fi
    new=$(mktemp "$lock.new.XXXXXX") || die "cannot write in $root"
    if ! { make_private "$new" "$mode" && exec 8<>"$new" && flock -n 8 && mv -fT "$new" "$lock"; }; then
        rm -f "$new"
        die "cannot replace $lock, which others can open, with a private one"
    fi
    exec 9>&8 8>&-
}
# The holder's record beside the lock ("user host pid command"), for those who wait or are refused: written by each
# one that takes the lock, under a new name renamed into place
note_lock_holder() {
    local new
    new=$(mktemp "$lock_record.new.XXXXXX") || return 0
    if echo "$(id -un) $(hostname) $$ ${0##*/}" >"$new" && make_private "$new" "$1"; then
        mv -fT "$new" "$lock_record" && return 0
    fi
    rm -f "$new"
}
# Who holds the lock, from the record: "lumi-owner's venv-pip on nid001 (process 123)"
lock_holder() {
    local who host pid what
    if [ -f "$lock_record" ] && [ ! -L "$lock_record" ] &&
        read -r who host pid what < <(timeout 2 head -c 256 -- "$lock_record" 2>/dev/null) && [ -n "$what" ]; then
        echo -n "$who's $what on $host (process $pid"
        if [ "$host" = "$(hostname)" ] && [ ! -d "/proc/$pid" ]; then
            echo -n ", which has ended: a process it started holds the lock"
        fi
        echo ")"
    else
        echo "another venv-pip, make-squashfs, unmake-squashfs or eb reinstall"
    fi
}
# A lock that others can open (as earlier versions made it) may be held by anyone: what to do then
lock_hint() {
    if [ -f "$lock" ] && (( 8#$(stat -c %a "$lock") & 8#006 )); then
        echo "; $lock is one that users outside the project can open (as earlier versions made it): if no one of" \
            "the project is changing $root, remove it, then try again"
    fi
}
# The lock counts when it is the file that is there now (a reinstall replaces it with the install dir)
take_lock() {
    local mode
    mode=$(lock_mode "$root")
    while :; do
        open_lock "$mode"
        [ -f /dev/fd/9 ] || die "$lock was replaced by something that is not a file while it was opened; remove it"
        flock "$@" 9 || return 1
        if [ /dev/fd/9 -ef "$lock" ]; then
            keep_lock_private "$mode"
            note_lock_holder "$mode"
            return 0
        fi
    done
}
# take_lock, saying once for whom it waits
wait_for_lock() {
    take_lock -n && return 0
    echo "${0##*/}: waiting for $(lock_holder) to finish with $root...$(lock_hint)" >&2
    take_lock
}
