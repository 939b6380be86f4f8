#!/bin/bash
# conda-python-simple: run python in the container, with the image's environment and the virtual
# environment ready; all arguments go to python. For single-task runs.
# Written by EasyBuild's SingularityContainer easyblock for module @module@.
# shellcheck disable=SC1091
source /runscripts/init-conda-venv || exit 1
exec python "$@"
