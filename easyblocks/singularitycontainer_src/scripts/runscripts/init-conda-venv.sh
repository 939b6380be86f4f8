# shellcheck shell=bash
# init-conda-venv: source this in the container to prepare the image's own Python environment and
# activate the virtual environment @venv@.
# Written by EasyBuild's SingularityContainer easyblock into its module's install dir.
# No 'set -e' here: this file is sourced into interactive shells.

# start-shell passes this file as BASH_ENV; nested bash processes need not read it again.
unset BASH_ENV

if ! { @container_init@
}; then
    echo "init-conda-venv: error: the container initialisation failed:" @container_init_word@ >&2
    # shellcheck disable=SC2317  # exit is reached when the file is run instead of sourced
    return 1 2>/dev/null || exit 1
fi
if [ -f @venv@/bin/activate ]; then
    # shellcheck disable=SC1091
    source @venv@/bin/activate || { echo "init-conda-venv: error: cannot activate @venv@" >&2; return 1; }
fi
@cache_functions@
set_up_caches @cache_parent@ @module_word@ @cache_dirs@
unset -f set_up_caches singularitycontainer_cache_root singularitycontainer_cache_refusal
