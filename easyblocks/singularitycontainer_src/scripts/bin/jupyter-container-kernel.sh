# jupyter-container-kernel: a kernelspec (Jupyter's layout: <kernels dir>/<name>/kernel.json)
# whose kernel is the venv's Python in the container, started by this script as the other
# commands start the container
container_python() {  # the venv's Python, with the arguments given; exec: call it in a subshell to come back
    in_container_prepared "$venv/bin/python" "$@"
}

json_str() {  # a JSON string (the display name has no control characters: checked with the arguments)
    local text=${1//\\/\\\\}
    printf '"%s"' "${text//\"/\\\"}"
}

is_ours() {  # a kernelspec dir whose kernel is this module's
    [ -f "$1/kernel.json" ] && grep -qF "    $kernel_launcher_json," "$1/kernel.json"
}

# In a shared prefix, a kernel of this name may be another member's: whose it is ("lumi-owner's"), if not yours
others() {
    if [ -L "$1" ] || [ ! -O "$1" ]; then
        echo "$(stat -c %U "$1")'s"
    fi
}
# Stop unless you can $2 (replace, remove) the kernel dir $1 of another member: its directory and the one it is in
# must be writable for you (the owner's umask decides)
removable_or_stop() {
    local theirs
    theirs=$(others "$1")
    [ -n "$theirs" ] || return 0
    if [ ! -w "${1%/*}" ] || { [ ! -L "$1" ] && [ ! -w "$1" ]; }; then
        die "the kernel ${1##*/} in ${1%/*} is $theirs: you cannot $2 it (they made it writable only for" \
            "themselves); ask them to, or give another --name"
    fi
}

# In a shared prefix $1 (--prefix; nothing: none) another member may have put a link at share, share/jupyter or
# share/jupyter/kernels, to a directory of yours: jupyter-container-kernel would make and remove kernels there. Stop at
# a link that is not your own.
no_others_link_below_prefix() {
    local path=$1 part
    [ -n "$path" ] || return 0
    for part in share jupyter kernels; do
        path=$path/$part
        if [ -L "$path" ] && [ "$(stat -c %u -- "$path")" != "$EUID" ]; then
            die "$path is a link of $(stat -c %U -- "$path")'s (to $(readlink -- "$path")):" \
                "jupyter-container-kernel does not write through another user's link; remove it, or give another" \
                "--prefix"
        fi
    done
}

# Stop where other users could rename or replace the kernel made in the kernels dir $1 (or in what of it is to be
# made) although your umask keeps it yours: under umask 002 the group's members may (you chose it), under 022 nobody
kernels_dir_keeps_yours() {
    local dir=$1 trust='' why
    until [ -e "$dir" ]; do
        dir=${dir%/*}
        dir=${dir:-/}
    done
    (( 8#$(umask) & 8#020 )) || trust=group
    if why=$(others_can_replace_in "$dir" "$trust"); then
        die "other users can rename or replace what you make in $why: they could put a kernel of theirs in the" \
            "place of this one in $1, although your umask ($(umask)) keeps it yours; give a --prefix that only you" \
            "(and root) can write in, up to /, or use umask 002 if your group may change the kernel"
    fi
}

kernel_json() {  # with the display name $1
    printf '{\n  "argv": [\n    %s,\n    "start",\n    "-f",\n    "{connection_file}"\n  ],\n' "$kernel_launcher_json"
    printf '  "display_name": %s,\n  "language": "python",\n  "interrupt_mode": "signal",\n' \
        "$(json_str "$1")"
    printf '  "metadata": {\n    "debugger": true,\n    "singularitycontainer_module": %s\n  }\n}\n' \
        "$(json_str "$module")"
}

# The kernel $2 with the display name $3 in the kernels dir $1 (in the prefix $4, or none); $5: yes to replace one that
# is not this module's
install_kernel() {
    local kernels_dir=$1 kernel_name=$2 display_name=$3 prefix=$4 force=$5
    local dir=$kernels_dir/$kernel_name new theirs=
    if [ -e "$dir" ] && ! is_ours "$dir" && [ -z "$force" ]; then
        die "a kernel named $kernel_name is in $kernels_dir already, not this module's: give another --name," \
            "or --force to replace it"
    fi
    if [ -e "$dir" ] || [ -L "$dir" ]; then
        removable_or_stop "$dir" replace
        theirs=$(others "$dir")
    fi
    local check='import sys
try:
    import ipykernel.kernelapp
except ImportError as error:
    print(error)
    sys.exit(3)'
    local status=0 said
    said=$(container_python -c "$check") || status=$?
    if [ "$status" = 3 ]; then
        die "the container's Python cannot import ipykernel ($said): install it into the module's venv with" \
            "'venv-pip install ipykernel', then run jupyter-container-kernel install again"
    fi
    [ "$status" = 0 ] || die "the container's Python did not start (exit code $status, see above): no kernel installed"
    no_others_link_below_prefix "$prefix"
    kernels_dir_keeps_yours "$kernels_dir"
    mkdir -p "$kernels_dir" || die "cannot create $kernels_dir"
    new=$(new_private_dir "$kernels_dir" ".$kernel_name.new.") || die "cannot write in $kernels_dir"
    kernel_json "$display_name" >"$new/kernel.json"
    # then the umask's mode, as kernel.json and all else you write (mktemp makes it private): in a shared prefix, the
    # group may change it or not, for both alike. Not before kernel.json is written: a member who saw the directory
    # appear could put a link there to a file of yours
    chmod "$(umask_mode 777)" "$new"
    if ! { rm -rf -- "$dir" && rename_into_place "$new" "$dir"; }; then
        remove_own_tree "$new"
        die "cannot replace $dir"
    fi
    echo "Installed kernel $kernel_name (\"$display_name\") in $dir${theirs:+, in place of $theirs}"
}

remove_kernel() {  # the kernel $2 in the kernels dir $1 (in the prefix $3, or none)
    local kernels_dir=$1 kernel_name=$2 dir=$1/$2 theirs
    no_others_link_below_prefix "$3"
    [ -e "$dir" ] ||
        die "there is no kernel named $kernel_name in $kernels_dir (jupyter-container-kernel list shows them)"
    is_ours "$dir" || die "the kernel $kernel_name in $kernels_dir is not this module's: remove it with" \
        "'jupyter kernelspec remove $kernel_name' if you mean it"
    removable_or_stop "$dir" remove
    theirs=$(others "$dir")
    rm -rf -- "$dir" || die "cannot remove $dir"
    echo "Removed ${theirs:+$theirs }kernel $kernel_name from $kernels_dir"
}

list_kernels() {  # where Jupyter finds kernels: JUPYTER_PATH, the user's data dir, the system's
    local user_dir=${JUPYTER_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/jupyter} data_dirs=() dir spec name
    IFS=: read -ra data_dirs <<<"${JUPYTER_PATH:-}"
    for dir in "${data_dirs[@]}" "$user_dir" /usr/local/share/jupyter /usr/share/jupyter; do
        for spec in "$dir"/kernels/*/; do
            spec=${spec%/}
            is_ours "$spec" || continue
            name=$(sed -n 's/^  "display_name": "\(.*\)",$/\1/p' "$spec/kernel.json" | sed 's/\\"/"/g; s/\\\\/\\/g')
            # (another member's kernel: its name and display name are printed as text, not as what they say)
            printf '%s\t%s\t%s\n' "$(printable "${spec##*/}")" "$(printable "$spec")" "$(printable "$name")"
        done
    done
}

# jupyter-container-kernel: the command (its arguments, the launch's checks, then the action)
jupyter_container_kernel() {
    jupyter_kernel_arguments "$@"
    prepare_launch
    case "$action" in
        start)
            # The connection file, wherever Jupyter put it ($XDG_RUNTIME_DIR is not bound by default): bound as itself
            case "$connection_file" in
                *,* | *:*) die "the connection file $connection_file has a ',' or ':' in its path, which a bind" \
                    "cannot have: set JUPYTER_RUNTIME_DIR to a directory without them" ;;
            esac
            export SINGULARITY_BINDPATH="${SINGULARITY_BINDPATH:+$SINGULARITY_BINDPATH,}$connection_file"
            export APPTAINER_BINDPATH="${APPTAINER_BINDPATH:+$APPTAINER_BINDPATH,}$connection_file"
            container_python -m ipykernel_launcher -f "$connection_file"
            ;;
        install) install_kernel "$kernels_dir" "$kernel_name" "$display_name" "$kernels_prefix" "$force" ;;
        remove) remove_kernel "$kernels_dir" "$kernel_name" "$kernels_prefix" ;;
        list) list_kernels ;;
    esac
}
