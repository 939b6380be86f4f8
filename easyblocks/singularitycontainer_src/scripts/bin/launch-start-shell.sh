
# With no arguments an interactive shell, else bash with these arguments (e.g. -c 'pip list'); either way
# init-conda-venv has prepared the image's environment and activated the virtual environment first.
if [ "$#" -eq 0 ]; then
    in_container "$sif" /bin/bash --rcfile /runscripts/init-conda-venv -i
fi
export SINGULARITYENV_BASH_ENV=/runscripts/init-conda-venv APPTAINERENV_BASH_ENV=/runscripts/init-conda-venv
in_container "$sif" /bin/bash "$@"