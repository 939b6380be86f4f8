# Whether pip's arguments change the virtual environment:
# install or uninstall (the first word that is neither an option nor the value of one of pip's general options),
# without --help, --dry-run or a target of their own. Sets pip_user=yes for --user, which installs into ~/.local,
# where the virtual environment does not look.
pip_changes_venv() {
    pip_subcommand=
    pip_user=
    while [ "$#" -gt 0 ]; do
        case "$1" in
            --python | --log | --log-file | --proxy | --retries | --timeout | --exists-action | --trusted-host | \
                --cert | --client-cert | --cache-dir | --use-feature | --use-deprecated)
                [ -n "$pip_subcommand" ] || [ "$#" -eq 1 ] || shift ;;
            -h | --help | --dry-run | -t | --target | --target=* | --prefix | --prefix=* | --root | --root=*)
                return 1 ;;
            --user) pip_user=yes ;;
            -*) ;;
            *) [ -n "$pip_subcommand" ] || pip_subcommand=$1 ;;
        esac
        shift
    done
    [ "$pip_subcommand" = install ] || [ "$pip_subcommand" = uninstall ]
}