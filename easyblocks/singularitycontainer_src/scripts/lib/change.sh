
# A change of the venv of the install dir $1, made one way by venv-pip, make-squashfs and unmake-squashfs (STATE, with
# FILES, LOCK_INSTALL_DIR and WORKDIR):
#   begin_change $1 wait|now   the lock (waiting for it, or status 1 at once where another run holds it; status 2
#                              where it cannot be taken, which it says), the umask
#                              that shares what the change writes, and the signal policy below, from here to the end;
#                              the command then reads the state, which nobody else changes until it ends
#   new_change_generation $1   a new generation for the change (change_new): private, and removed unless committed
#   commit_change $1 FORM      change_new, recorded as of the form layers or file, becomes the state, in one rename;
#                              no signal can come between
#   abort_change $1            what the change made and did not commit goes (run at exit, whatever the exit)
# The signal policy: HUP, INT and TERM end the command at once, with 128 + the signal's number. A long step runs in
# the background (in_background), since bash runs a trap only between commands: stop ends it, and what it started,
# first. The steps keep the terminal as stdin (pip asks before it uninstalls).
change_new=
child=
begin_change() {
    know_who_runs
    use_shared_umask "$1"
    if [ "$2" = wait ]; then
        wait_for_lock "$1" || return
    else
        take_lock_now "$1" || return
    fi
    local quoted
    printf -v quoted %q "$1"
    # shellcheck disable=SC2064  # (the install dir as it is now)
    trap "abort_change $quoted" EXIT
    stop_on_signals
}
new_change_generation() {
    change_new=$(new_generation "$1")
}
commit_change() {
    record_form "$change_new" "$2" || return 1
    trap '' HUP INT TERM  # (from the rename on, the new generation is the venv: nothing may remove it)
    if ! make_current "$1" "$change_new"; then
        stop_on_signals
        return 1
    fi
    change_new=
    stop_on_signals
}
abort_change() {
    remove_own_tree "$change_new"
    change_new=
    remove_workdirs_of_this_run "$1"
}
stop_on_signals() {
    trap 'stop 129' HUP
    trap 'stop 130' INT
    trap 'stop 143' TERM
}
in_background() {  # the command $@, run in the background and waited for: its status
    local status=0
    "$@" <&0 &
    child=$!
    wait "$child" || status=$?
    child=
    return "$status"
}
# A step that needs nothing of the next ones, started in the background beside them (it takes the second core while
# they wait for pip), with stdin from /dev/null (pip's questions are the terminal's): join_beside waits for it, its
# status; stop ends it as it ends the step in the background
beside=
start_beside() {
    "$@" </dev/null &
    beside=$!
}
join_beside() {
    local status=0
    [ -n "$beside" ] || return 0
    wait "$beside" || status=$?
    beside=
    return "$status"
}
stop() {  # end the command with the status $1, after the steps in the background
    local step
    for step in "$child" "$beside"; do
        if [ -n "$step" ]; then
            pkill -TERM -P "$step" 2>/dev/null || true  # (what a function run in the background started)
            kill "$step" 2>/dev/null || true
            wait "$step" 2>/dev/null || true
        fi
    done
    exit "$1"
}
