#!/bin/bash
# list-packages: list the Python packages visible in the container (image and virtual environment).
# Written by EasyBuild's SingularityContainer easyblock into its module's install dir.
# shellcheck disable=SC1091
source /runscripts/init-conda-venv || exit 1
exec python -m pip list "$@"
