# shellcheck shell=bash
# Sourced by tools/install-apptainer.sh and tools/install-apptainer-suid.sh: apt state of their own for Debian's
# unstable suite (sid), from the Debian archive this machine already uses; the system's apt sources are not changed.
#   sid_apt DIR [deb-src]   ->  sid_mirror (the archive) and sid_apt_options (apt-get's options), lists fetched
sid_apt() {
    local dir=$1 kinds=(deb)
    [ "${2:-}" != deb-src ] || kinds+=(deb-src)
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
    # shellcheck disable=SC2016  # apt-get's own $(...) fields
    sid_mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' | awk '$2 !~ /security/ {print $1; exit}')
    if [ -z "$sid_mirror" ]; then
        echo "${0##*/}: no Debian archive in this machine's apt sources" >&2
        return 1
    fi
    printf "%s [arch=$(dpkg --print-architecture)] $sid_mirror sid main\n" "${kinds[@]}" >"$dir/sources.list"
    # (the registry's sid can be a snapshot whose Release file is past its Valid-Until)
    sid_apt_options=(-o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache"
                     -o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
                     -o APT::Sandbox::User=root -o Acquire::Check-Valid-Until=false -o Debug::NoLocking=1)
    apt-get "${sid_apt_options[@]}" update -qq
}
