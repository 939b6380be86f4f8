@header@
@prelude@

if [ -n "${SINGULARITY_CONTAINER:-}${APPTAINER_CONTAINER:-}" ] || [ -d /.singularity.d/env ]; then
    die "already running inside a container; this command starts the container itself and would nest it"
fi
sif="${!sif_variable:-}"
[ -n "$sif" ] || die "module $module is not loaded; run 'module load $module' first"
[ -f "$sif" ] || die "container image $sif not found; reload the module (module load $module) or reinstall it with eb"
if conflicting=$(conflicting_module_loaded); then
    die "module $conflicting, loaded after $module, conflicts with it (their binds collide): module unload" \
        "$conflicting"
fi
find_runtime || exit 1
# A runtime that is a script (#!/usr/bin/env python3, say) finds this module's wrappers first on PATH: it would
# start a wrapper, which starts the runtime again, for ever.
if [ -n "${SINGULARITYCONTAINER_LAUNCHED_BY:-}" ]; then
    die "$runtime started $SINGULARITYCONTAINER_LAUNCHED_BY, which started $0: a loop. The runtime runs a command" \
        "found on PATH, and this module puts its wrappers there: make the runtime call its interpreter by full path"
fi
export SINGULARITYCONTAINER_LAUNCHED_BY="$0"
generation=$(current_generation "$root")
form=$(venv_form "$root" "$generation")
# (the runtime would only say "image format not recognized")
generation_whole "$generation" quick || die "$(damaged_state "$root" "$generation")"
if [ "$form" = missing ]; then
    echo "${0##*/}: warning: the virtual environment of $module is missing (neither $packed nor $dir exists):" \
        "Python in the container is the image's own. Reinstall the module (eb --rebuild), or put it back." >&2
fi
# The container gets the state of the venv as it is now, both files of it (STATE): not what a venv-pip elsewhere
# makes current while the runtime opens them one by one
for __name in SINGULARITY_OVERLAY APPTAINER_OVERLAY SINGULARITY_BINDPATH APPTAINER_BINDPATH; do
    [ -z "${!__name:-}" ] || export "$__name=$(pinned_entries "$root" "$generation" "${!__name}")"
done
unset __name
set_up_caches
@launch@
