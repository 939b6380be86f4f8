# Whether pip's arguments change the virtual environment:
# install or uninstall (the first word that is neither an option nor the value of one of pip's general options),
# without --help, --dry-run or a target of their own. Plain sh: the venv's pip runs it too.
pip_changes_venv() {
    pip_changes_venv_subcommand=
    while [ "$#" -gt 0 ]; do
        case "$1" in
            --python | --log | --log-file | --proxy | --retries | --timeout | --exists-action | --trusted-host | \
                --cert | --client-cert | --cache-dir | --use-feature | --use-deprecated)
                [ -n "$pip_changes_venv_subcommand" ] || [ "$#" -eq 1 ] || shift ;;
            -h | --help | --dry-run | -t | --target | --target=* | --prefix | --prefix=* | --root | --root=*)
                return 1 ;;
            -*) ;;
            *) [ -n "$pip_changes_venv_subcommand" ] || pip_changes_venv_subcommand=$1 ;;
        esac
        shift
    done
    case "$pip_changes_venv_subcommand" in
        install | uninstall) return 0 ;;
    esac
    return 1
}
# Whether pip's arguments have --user, which installs into ~/.local, where the virtual environment does not look
pip_wants_user() {
    for pip_wants_user_arg; do
        [ "$pip_wants_user_arg" != --user ] || return 0
    done
    return 1
}
