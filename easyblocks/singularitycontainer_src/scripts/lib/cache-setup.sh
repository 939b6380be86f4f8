# The caches (module help): in /tmp, per user, job and node; a value of the user's stays
@cache_root_rule@
__cache_root=$(@cache_root_call_quiet@) || __cache_root=
unset -f singularitycontainer_cache_root singularitycontainer_cache_refusal
__cache_dirs=()
declare -A __cache_users=()
# shellcheck disable=SC2043  # @cache_dirs@ is several words, filled at install
for __cache in @cache_dirs@; do
    __cache_name=${__cache%%=*}
    __cache_sub=${__cache#*=}
    __cache_dir=${!__cache_name-}
    if [ -n "${SINGULARITYCONTAINER_CACHE_ROOT:-}" ] &&
        [ "${__cache_dir#"$SINGULARITYCONTAINER_CACHE_ROOT"/}" != "$__cache_dir" ]; then
        __cache_dir=  # the module's
    fi
    if [ -n "$__cache_dir" ]; then
        __cache_users[$__cache_sub]=$__cache_dir
        __cache_dirs+=("$__cache_dir")
    elif [ -n "${__cache_users[$__cache_sub]:-}" ]; then
        __cache_dir=${__cache_users[$__cache_sub]}
    elif [ -n "$__cache_root" ]; then
        __cache_dir=$__cache_root/$__cache_sub
    else
        unset "$__cache_name"
        continue
    fi
    export "$__cache_name=$__cache_dir"
done
if [ "${#__cache_dirs[@]}" -gt 0 ]; then
    mkdir -p "${__cache_dirs[@]}" 2>/dev/null || true  # the user's own
fi
export SINGULARITYCONTAINER_CACHE_ROOT="$__cache_root"
unset __cache __cache_name __cache_sub __cache_dir __cache_dirs __cache_users __cache_root