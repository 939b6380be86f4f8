
# A private work directory (mode 0700) on node-local storage with room for $1 bytes, in $work: $TMPDIR, else /dev/shm,
# else /tmp; if none has room, one beside the install dir, and says so. Removed on any exit (clean_workdir).
make_workdir() {
    local need=$1 place free old run
    work=
    for place in "${TMPDIR:-}" /dev/shm /tmp; do
        if [ -z "$place" ] || [ ! -d "$place" ] || [ ! -w "$place" ]; then
            continue
        fi
        # what an earlier run of yours that was killed left here
        for old in "$place/venv-pip.$(hostname)".*.*; do
            run=${old%.*}
            if [ -O "$old" ] && ! grep -qas venv-pip "/proc/${run##*.}/cmdline"; then
                clean_workdir "$old"
            fi
        done
        free=$(df -B1 --output=avail "$place" 2>/dev/null | tail -n 1) || continue
        if [ "${free:-0}" -gt "$need" ]; then
            work=$(mktemp -d "$place/venv-pip.$(hostname).$$.XXXXXX") && return 0
        fi
    done
    echo "${0##*/}: working in $root: none of ${TMPDIR:+$TMPDIR, }/dev/shm and /tmp has the" \
        "$(( need >> 20 )) MiB free that it needs" >&2
    work="$dir.venv-pip.tmp.$(hostname).$$"
    mkdir -m 0700 "$work"
}
clean_workdir() {  # the overlay's work directory is mode 000
    [ -n "${1:-}" ] && [ -e "$1" ] || return 0
    chmod -R u+rwx "$1" 2>/dev/null
    rm -rf "$1"
}
