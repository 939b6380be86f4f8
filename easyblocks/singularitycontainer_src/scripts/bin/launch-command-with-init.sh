exec "$runtime" @entry@ "$sif" \
    /bin/bash -c 'source /runscripts/init-conda-venv && exec "$@"' @command@ @command@ "$@"