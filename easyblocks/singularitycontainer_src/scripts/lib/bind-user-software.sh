# The reading of a bind.
# A bind as the runtime reads it, src[:dst[:opts]] ($1): its source, its destination (the source where none is
# given) and its options, into bind_source, bind_destination and bind_options (no subshell: a start reads every
# bind; the twin of parameters.bind_fields)
# shellcheck disable=SC2034  # (bind_options: for its callers)
bind_fields() {
    local rest
    bind_source=${1%%:*}
    rest=${1#"$bind_source"}
    rest=${rest#:}
    bind_destination=${rest%%:*}
    bind_options=${rest#"$bind_destination"}
    bind_options=${bind_options#:}
    [ -n "$bind_destination" ] || bind_destination=$bind_source
}
# The module's binds, with /user-software bound from where the venv is now
# (a change since the module was loaded may have packed or unpacked it, or removed what it bound):
# use_for_user_software <source> [<bind options>]; without a source, nothing is bound there.
bind_user_software_from() {
    local IFS=, entry entries kept=() dropped=
    read -ra entries <<<"$1"
    for entry in "${entries[@]}"; do
        case "$entry" in
            ro | rw | image-src=* | id=*) [ -n "$dropped" ] || kept+=("$entry") ;;  # options of the entry before
            *)
                bind_fields "$entry"
                dropped=
                if [ "$bind_destination" = /user-software ]; then
                    dropped=yes
                else
                    kept+=("$entry")
                fi
                ;;
        esac
    done
    [ -z "${2:-}" ] || kept+=("$2:/user-software${3:+:$3}")
    echo "${kept[*]}"
}
use_for_user_software() {
    SINGULARITY_BINDPATH=$(bind_user_software_from "${SINGULARITY_BINDPATH:-}" "$@")
    APPTAINER_BINDPATH=$(bind_user_software_from "${APPTAINER_BINDPATH:-}" "$@")
    export SINGULARITY_BINDPATH APPTAINER_BINDPATH
}
# The overlays that the runtime reads (runtime_overlays) but those of the packed venv of the install dir $1 (in a
# generation of it, named through its link or not, see STATE): the user's own, which the module found
others_overlays() {
    local IFS=, entry entries kept=()
    read -ra entries <<<"$(runtime_overlays)"
    for entry in "${entries[@]}"; do
        if [ -n "$entry" ] && ! of_the_packed_venv "$1" "${entry%:ro}"; then
            kept+=("$entry")
        fi
    done
    echo "${kept[*]}"
}
# The overlays the runtime (find_runtime) reads: Apptainer APPTAINER_OVERLAY, else SINGULARITY_OVERLAY; SingularityCE
# only SINGULARITY_OVERLAY (the module sets both alike; a user may change one)
# shellcheck disable=SC2154  # runtime_kind: find_runtime's (container.sh)
runtime_overlays() {
    if [ "$runtime_kind" = apptainer ]; then
        echo "${APPTAINER_OVERLAY:-${SINGULARITY_OVERLAY:-}}"
    else
        echo "${SINGULARITY_OVERLAY:-}"
    fi
}
# The user's overlays $1 (others_overlays) that a change's containers take: the read-only ones (a SquashFS file, or
# an entry with :ro). A writable one (a directory, an EXT3 image) would be a second beside the change's own, which the
# runtime refuses; it is left out, saying so in one line (pip does not see what it holds)
read_only_overlays() {
    local IFS=, entry entries kept=() left=()
    read -ra entries <<<"$1"
    for entry in "${entries[@]}"; do
        if [ "${entry%:ro}" != "$entry" ] || squashfs_whole "$entry" quick; then
            kept+=("$entry")
        else
            left+=("$entry")
        fi
    done
    if [ "${#left[@]}" -gt 0 ]; then
        echo "${0##*/}: leaving your writable overlay ${left[*]} out of the change's containers (a change has one" \
            "writable layer, its own); pip does not see what it holds" >&2
    fi
    echo "${kept[*]}"
}
# The runtime's overlays: the list $1 (others_overlays), then $2... (the packed venv's layers, a writable directory)
use_overlays() {
    local IFS=, overlay overlays=()
    for overlay in "$@"; do  # (an empty one is none)
        [ -z "$overlay" ] || overlays+=("$overlay")
    done
    SINGULARITY_OVERLAY="${overlays[*]}"
    APPTAINER_OVERLAY="${overlays[*]}"
    export SINGULARITY_OVERLAY APPTAINER_OVERLAY
}
