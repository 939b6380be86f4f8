#!/bin/bash
# @name@: @purpose@
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
set -euo pipefail
module=@module_word@

die() {
    echo "@name@: error: $*" >&2
    exit 1
}
# For a command that takes no arguments: -h or --help says what it does, any other argument stops it before anything
# is done
no_arguments() {
    case "${1:-}" in
        -h | --help)
            printf '%s\n' @help@
            exit 0
            ;;
        *)
            [ "$#" -eq 0 ] ||
                die "@name@ takes no arguments, '$(printable "$1")' was given (usage: @name@; -h says more)"
            ;;
    esac
}
@files@
