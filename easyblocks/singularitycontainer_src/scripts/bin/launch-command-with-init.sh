in_container "$sif" \
    /bin/bash -c 'source /runscripts/init-conda-venv && exec "$@"' @command@ @command@ "$@"