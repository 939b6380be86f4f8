#!/bin/bash
# @name@: @purpose@
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
set -euo pipefail
command_name=@name_word@
command_help=(@help@)
# The install's values and the functions of its commands, beside bin/: bash reads the file whole, at once
__library=$(readlink -f "${BASH_SOURCE[0]}")
__library=${__library%/*/*}/@library@
if [ ! -f "$__library" ]; then
    echo "$command_name: error: $__library is missing: reinstall the module (eb --rebuild)" >&2
    exit 1
fi
# shellcheck source-path=SCRIPTDIR source=../@library@
source "$__library"
unset __library
# (the library of this file's install, not of a reinstall that replaced it while this command started)
[ "$install_stamp" = @stamp@ ] || die "the module was reinstalled while $command_name started: run it again"
@call@ "$@"
