[ -w "$root" ] ||
    die "$root is not writable for you: only whoever installed the module can change it"
command -v flock >/dev/null || die "flock not found on PATH (it comes with util-linux)"
lock="$root/@lock@"
# Another member's lock file may not be writable for you: flock works on a file opened read-only. The lock counts
# when it is the file that is there now (a reinstall replaces it with the install dir).
take_lock() {
    while :; do
        { exec 9>>"$lock"; } 2>/dev/null || { exec 9<"$lock"; } 2>/dev/null ||
            die "cannot open $lock, the lock of this install dir; ask whoever installed the module"
        flock "$@" 9 || return 1
        if [ /dev/fd/9 -ef "$lock" ]; then
            return 0
        fi
    done
}