#!/bin/sh
# The image's pip, run by this virtual environment's Python.
venv=$(dirname "$(dirname "$0")")
@pip_changes_venv@

# The command venv-pip runs instead: these arguments without --user, quoted for the shell where needed
as_venv_pip() {
    printf 'venv-pip'
    for arg in "$@"; do
        [ "$arg" != --user ] || continue
        case "$arg" in
            '' | *[!A-Za-z0-9_./=:,+@%-]*) printf " '%s'" "$(printf '%s' "$arg" | sed "s/'/'\\\\''/g")" ;;
            *) printf ' %s' "$arg" ;;
        esac
    done
}

if pip_changes_venv "$@"; then
    problem=
    also=
    if pip_wants_user "$@"; then
        problem="--user would install into ~/.local, which $venv does not see."
        also=" (with --user after venv-pip's command: for you alone, in a layer of yours on a packed venv)"
    elif [ ! -w "$venv/bin" ]; then
        problem="$venv is read-only in the container (packed in user-software.squashfs, or not yours)."
    fi
    if [ -n "$problem" ]; then
        echo "pip: $problem Outside the container, with the module loaded, run: $(as_venv_pip "$@")$also" >&2
        exit 1
    fi
fi
# pip list of all the venv's packages as a table (not another format, help, or a part: outdated, not required...),
# where a personal layer of the user's is on top: then, on stderr, which of these are theirs alone (pip takes an
# option's unambiguous start for it: --form json)
lists_all_as_table() {
    while [ "$#" -gt 0 ]; do
        case "$1" in
            -h | --h* | -V | --vers* | -o | --o* | -u | --up* | --user | -e | --ed* | --not* | --exc* | --pa* | \
                -[!-]*[houeV]*) return 1 ;;
            --fo=* | --for=* | --form=* | --forma=* | --format=*) [ "${1#*=}" = columns ] || return 1 ;;
            --fo | --for | --form | --forma | --format) [ "${2:-}" = columns ] || return 1 ;;
        esac
        shift
    done
}
# shellcheck disable=SC2154  # pip_changes_venv_subcommand: pip_changes_venv's (pip-changes-venv.sh)
if [ "$pip_changes_venv_subcommand" = list ] && [ -s @yours@ ] && lists_all_as_table "$@"; then
    "$(dirname "$0")/python" -m pip "$@" || exit
    {
        echo
        echo "Yours alone, in your layer (venv-pip install --user; outside the container: venv-pip list --user):"
        cat @yours@
    } >&2
    exit 0
fi
exec "$(dirname "$0")/python" -m pip "$@"
