
# shellcheck disable=SC2198  # @holds_lock@ is a variable name, filled at install
if [ "${@holds_lock@:-}" != "$root" ]; then
    take_lock -n || die "$(lock_holder) is changing $root; try again when it is done$(lock_hint)"
fi
