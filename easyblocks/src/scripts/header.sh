#!/bin/bash
# @name@: @purpose@
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
set -euo pipefail
module=@module_word@

die() {
    echo "@name@: error: $*" >&2
    exit 1
}
@files@
