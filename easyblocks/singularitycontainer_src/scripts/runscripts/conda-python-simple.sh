#!/bin/bash
# conda-python-simple: run python in the container, with the image's environment and the virtual
# environment ready; all arguments go to python. For single-task runs.
# Written by EasyBuild's SingularityContainer easyblock into its module's install dir.
# shellcheck disable=SC1091
source /runscripts/init-conda-venv || exit 1
exec python "$@"
