#!/bin/bash
# @name@: @purpose@
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
set -euo pipefail
command_name=@name_word@
command_help=(@help@)
command_stamp=@stamp@  # (the library refuses another install's: a reinstall while this command started)
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
@call@ "$@"
