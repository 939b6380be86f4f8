remove_leftovers() {
    local old host pid
    for old in "$1".tmp.*; do
        [ -e "$old" ] || continue
        host="${old#"$1".tmp.}"
        pid="${host##*.}"
        host="${host%.*}"
        if [ "$host" != "$(hostname)" ]; then
            echo "${0##*/}: warning: $old was left by a run on $host; remove it if none runs there any more" >&2
        elif grep -qas -e make-squashfs -e venv-pip "/proc/$pid/cmdline"; then
            die "$old is being written by process $pid; wait for it to finish"
        else
            echo "Removing $old, left by an interrupted run."
            rm -rf "$old"
        fi
    done
}