
# The lock of the install dir $1 at once, or status 1 where another run holds it; nothing to take where the install
# that runs this holds it (@holds_lock@ names its install dir: the make-squashfs of an install)
take_lock_now() {
    # shellcheck disable=SC2198  # @holds_lock@ is a variable name, filled at install
    [ "${@holds_lock@:-}" = "$1" ] || take_lock "$1" -n
}
