# The module's binds, with /user-software bound from where the venv is now
# (a change since the module was loaded may have packed or unpacked it, or removed what it bound):
# use_for_user_software <source> [<bind options>].
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
    kept+=("$2:/user-software${3:+:$3}")
    echo "${kept[*]}"
}
use_for_user_software() {
    SINGULARITY_BINDPATH=$(bind_user_software_from "${SINGULARITY_BINDPATH:-}" "$@")
    APPTAINER_BINDPATH=$(bind_user_software_from "${APPTAINER_BINDPATH:-}" "$@")
    export SINGULARITY_BINDPATH APPTAINER_BINDPATH
}