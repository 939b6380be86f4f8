# The caches (module help): in /tmp, per user, job and node; a value of the user's stays.
# set_up_caches PARENT MODULE VARIABLE=SUBDIR...: the caches of container_cache_dirs for the job and node this runs
# in, exported, in the root that singularitycontainer_cache_root (CACHE_ROOT_RULE) gives under PARENT. A value of the
# user's stays, and the caches of the same subdirectory after it follow it (MIOpen's two); a value the module set when
# it was loaded (elsewhere, or outside the job) moves here. Without a root, the module's values go.
set_up_caches() {
    local parent=$1 module_name=$2 cache name sub dir root subs=() dirs=()
    local -A users=()
    shift 2
    for cache; do
        subs+=("${cache#*=}")
    done
    # (${a[@]+...}: an empty array under set -u, in an image's bash before 4.4)
    root=$(singularitycontainer_cache_root -q "$parent" "$module_name" ${subs[@]+"${subs[@]}"}) || root=
    for cache; do
        name=${cache%%=*}
        sub=${cache#*=}
        dir=${!name-}
        if [ -n "${SINGULARITYCONTAINER_CACHE_ROOT:-}" ] &&
            [ "${dir#"$SINGULARITYCONTAINER_CACHE_ROOT"/}" != "$dir" ]; then
            dir=  # the module's
        fi
        if [ -n "$dir" ]; then
            users[$sub]=$dir
            dirs+=("$dir")
        elif [ -n "${users[$sub]:-}" ]; then
            dir=${users[$sub]}
        elif [ -n "$root" ]; then
            dir=$root/$sub
        else
            unset "$name"
            continue
        fi
        export "$name=$dir"
    done
    if [ "${#dirs[@]}" -gt 0 ]; then
        mkdir -p "${dirs[@]}" 2>/dev/null || true  # the user's own
    fi
    export SINGULARITYCONTAINER_CACHE_ROOT="$root"
}
