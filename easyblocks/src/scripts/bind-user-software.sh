# The module's binds, with /user-software bound from where the venv is now
# (a change since the module was loaded may have packed or unpacked it, or removed what it bound):
# use_for_user_software <source> [<bind options>]; without a source, nothing is bound there.
bind_user_software_from() {
    local IFS=, entry entries kept=() dropped=
    read -ra entries <<<"$1"
    for entry in "${entries[@]}"; do
        case "$entry" in
            *:/user-software | *:/user-software:*) dropped=yes ;;
            ro | rw | image-src=* | id=*) [ -n "$dropped" ] || kept+=("$entry") ;;  # options of the entry before
            *) dropped= ; kept+=("$entry") ;;
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
# The user's own overlays (those the module found), then, with use_layers, the layers of the packed venv
# ($squashfs, $changes) and the directories $@ (in $work) on top of them, instead of a bind at /user-software. The
# module's are those in a generation of this install dir (STATE), named through its link or not.
set_overlays() {
    local IFS=, entry entries kept=()
    read -ra entries <<<"${APPTAINER_OVERLAY:-${SINGULARITY_OVERLAY:-}}"
    for entry in "${entries[@]}"; do
        if [ -n "$entry" ] && ! of_the_packed_venv "$root" "${entry%:ro}" && [[ "$entry" != "${work:-/}"/* ]]; then
            kept+=("$entry")
        fi
    done
    kept+=("$@")
    SINGULARITY_OVERLAY="${kept[*]}"
    APPTAINER_OVERLAY="${kept[*]}"
    export SINGULARITY_OVERLAY APPTAINER_OVERLAY
}
use_layers() {
    set_overlays "$squashfs:ro" "$changes:ro" "$@"
    use_for_user_software ""  # (no bind there)
}
drop_layers() {
    set_overlays
}