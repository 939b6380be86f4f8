# The lock of the install dir $1, or stop saying who holds it;
# nothing to take where the install that runs this holds it (@holds_lock@ names its install dir)
lock_or_stop() {
    # shellcheck disable=SC2198  # @holds_lock@ is a variable name, filled at install
    if [ "${@holds_lock@:-}" != "$1" ]; then
        take_lock "$1" -n || die "$(lock_holder "$1") is changing $1; try again when it is done$(lock_hint "$1")"
    fi
}
