
# Personal layers (PERSONAL, README "Your own packages on a shared install"): a user's own change of the install's
# venv (venv-pip install --user), a SquashFS layer of theirs on top of the install's layers, in their personal dir.
# That is laid out as the install dir's packed venv (STATE): its link names a generation that holds the layer
# ($changes_name), the name of the install's generation it was made on ($base_record) and what its owner asked pip
# for ($requests_name, one request a line), with links to the install's two files of that state ($base_squashfs_link,
# $base_changes_link): the module's load names the install's layers through them, the commands the install's own,
# pinned. It is used only where nobody else can write or rename it, and only on the state of the install's venv it
# was made on: another state may hold other versions of what it changes.

# The personal dir of the module $1 (NAME/VERSION), into the variable pdir (the caller's: no subshell, at every
# start of a wrapper): $personal_layers_var, else XDG_DATA_HOME's (~/.local/share's) $personal_layers_subdir, then
# the module's name/version (the module's twin: personal_layer in primitives.lua and primitives.tcl)
personal_dir() {
    pdir=${!personal_layers_var:-}
    [ -n "$pdir" ] || pdir="${XDG_DATA_HOME:-${HOME:-}/.local/share}/$personal_layers_subdir"
    pdir="${pdir%/}/$1"
}
# Whether the caller's personal layer may be used on the install's generation $1 (a path): personal_layer gets its
# file through the personal dir's link (a later change of the layer then reaches new starts), personal_generation its
# generation; where it may not, personal_refusal says why (personal_moved then names the layer's generation and the
# install's where the install's venv changed since the layer was made). All empty where there is none.
personal_layer='' personal_generation='' personal_refusal='' personal_moved=''
# shellcheck disable=SC2154  # replace_why: replace_check's (files.sh)
check_personal_layer() {
    local pdir base='' mode=''
    personal_layer='' personal_generation='' personal_refusal='' personal_moved=''
    personal_dir "$module"
    if [ ! -L "$pdir/$packed_name" ]; then
        if [ -n "$module_named_personal" ]; then
            # (the module found it at load: a job's node that does not see the personal dir, or one removed since)
            personal_refusal="there is no $pdir/$packed_name on ${HOSTNAME:-this node} (a job's nodes must see it:"
            personal_refusal+=" set $personal_layers_var to a directory they all see)"
        fi
        return 0
    fi
    personal_generation=$(current_generation "$pdir")
    if [ "${pdir:0:1}" != / ]; then
        personal_refusal="it is not an absolute path (set $personal_layers_var to one)"
    elif [ -z "$personal_generation" ] || [ ! -f "$personal_generation/$changes_name" ]; then
        personal_refusal="$pdir/$packed_name names no layer (remove it: rm $pdir/$packed_name)"
    elif replace_check "$personal_generation"; then
        personal_refusal="other users can rename or replace what is in $replace_why"
    elif [ -L "$personal_generation/$changes_name" ] || [ ! -O "$personal_generation/$changes_name" ] ||
        ! mode=$(stat -c %a -- "$personal_generation/$changes_name") || (( 8#$mode & 8#022 )); then
        personal_refusal="$personal_generation/$changes_name is not yours alone (others can write it)"
    elif [ ! -r "$personal_generation/$changes_name" ]; then
        personal_refusal="you cannot read $personal_generation/$changes_name on ${HOSTNAME:-this node}"
    else
        [ ! -f "$personal_generation/$base_record" ] || IFS= read -r base <"$personal_generation/$base_record" || true
        if [ "$base" != "${1##*/}" ]; then
            personal_refusal="the install's venv changed since you made it (it may hold other versions of what your"
            personal_refusal+=" layer changes): venv-pip sync --user makes your layer again on the venv as it is now"
            personal_moved="${personal_generation##*/}.${1##*/}"
        else
            personal_layer="$pdir/$packed_name/$changes_name"
            return 0
        fi
    fi
    personal_generation=''
}
# The overlay list $1 without the entries in the personal dir $2 (the module names the layer at load)
without_personal_entries() {
    local IFS=, entry entries kept=()
    read -ra entries <<<"$1"
    for entry in "${entries[@]}"; do
        [ "${entry#"$2"/}" != "$entry" ] || kept+=("$entry")
    done
    echo "${kept[*]}"
}
# A command of the module starts the container (prepare_launch): the caller's personal layer on top of the install's
# layers of the generation $generation of the form $form, pinned to its own generation, where it may be used
# (check_personal_layer); else without the one the module named at load (a base that moved since, a layer removed),
# saying why in one line. With $1 empty (venv-pip, whose containers take it where they need it), without it, and
# module_named_personal says whether the module named it. Nothing to do, and no process, where there is no personal
# dir and the module named none.
# shellcheck disable=SC2154  # generation, form, root: prepare_launch's (launch.sh) and the install's values
module_named_personal=''
use_personal_layer() {
    local pdir name value install_entries=''
    personal_dir "$module"
    case ",${SINGULARITY_OVERLAY:-},${APPTAINER_OVERLAY:-}" in
        *",$pdir/"*) module_named_personal=yes ;;
        *) [ -L "$pdir/$packed_name" ] || return 0 ;;
    esac
    personal_layer='' personal_refusal='' personal_moved=''
    [ -z "$1" ] || check_personal_layer "$generation"
    if [ -n "$personal_layer" ] && [ "$form" != layers ]; then
        personal_refusal="the install's venv is not in layers now (its form is $form)"
        personal_layer=''
    fi
    # (the module named the install's layers through the links of the personal generation: here they are the install's
    # own, of the generation this start is pinned to, as for a user with no layer; none where no generation is)
    if [ -n "$module_named_personal" ] && [ -n "$generation" ]; then
        pinned_entries "$root" "$generation" "$root/$packed_name/$squashfs_name:ro,$root/$packed_name/$changes_name:ro"
        install_entries=$pinned
    fi
    for name in SINGULARITY_OVERLAY APPTAINER_OVERLAY; do
        value=$(without_personal_entries "${!name:-}" "$pdir")
        [ -z "$install_entries" ] || value+="${value:+,}$install_entries"
        [ -z "$personal_layer" ] || value+="${value:+,}$personal_generation/$changes_name:ro"
        export "$name=$value"
    done
    [ -z "$personal_moved" ] || said_once_in "$pdir" || personal_refusal=''
    [ -z "$personal_refusal" ] || echo "${0##*/}: not using your own packages in $pdir: $personal_refusal" >&2
}
# Whether this is the first start to find the caller's layer and the install's generation as personal_moved names
# them (the state of a base that moved), in the personal dir $1 (the caller's, checked): the record $said_record.<that
# state>, made with O_EXCL by the one start that says so (of a job's ranks that start at once, one); those of earlier
# states go. The commands say it at the first start only; module load and venv-pip list --user each time. Where the
# record cannot be made (a personal dir read-only on this node), at each start.
said_once_in() {
    local said
    [ ! -e "$1/$said_record.$personal_moved" ] || return 1
    if (set -C && : >"$1/$said_record.$personal_moved") 2>/dev/null; then
        for said in "$1/$said_record".*; do
            [ "$said" = "$1/$said_record.$personal_moved" ] || rm -f -- "$said"
        done
        personal_refusal+=" (said once)"
    elif [ -e "$1/$said_record.$personal_moved" ]; then
        return 1  # (another start made it just now, and says so)
    fi
    return 0
}
# For the module's load of a venv in layers (venv-pip --module-personal-layer, before the module's variables are set):
# where the caller's personal layer may be used, the overlay entries of the install's layers and it, all through the
# personal dir's link (its generation links to the install's files it was made on), on stdout; else why not, in one
# line on stderr. A shell loaded before a change of the install's venv or of the layer then starts a container with a
# layer and its base, both of one generation of the personal dir, until venv-pip sync --user makes another.
module_personal_layer() {
    local pdir
    personal_dir "$module"
    check_personal_layer "$(current_generation "$root")"
    if [ -n "$personal_layer" ] && [ -L "$personal_generation/$base_squashfs_link" ] &&
        [ -L "$personal_generation/$base_changes_link" ]; then
        echo "$pdir/$packed_name/$base_squashfs_link:ro,$pdir/$packed_name/$base_changes_link:ro,$personal_layer:ro"
        return 0
    fi
    if [ -n "$personal_layer" ]; then
        # (the commands use it: they take the install's files themselves)
        echo "$module: singularity exec and run in this shell leave out your own packages in $pdir (an earlier" \
            "venv-pip made your layer without the links to the install's files it was made on; the module's commands" \
            "use it): venv-pip sync --user makes it again" >&2
        return 0
    fi
    [ -z "$personal_refusal" ] || echo "$module: not using your own packages in $pdir: $personal_refusal" >&2
}
# The directories of the venv that a personal change starts from, in the SquashFS files $@ (bottom first: the
# install's, then the caller's layer so far) as the overlay stacks them (a whiteout, or a file, of a layer above
# hides a directory and what is in it), into the new file $work/venv-dirs (NUL-terminated paths from the container's
# root, a directory before what is in it); those whose mode (with the owner's write bit) is not 0755 also into
# $work/venv-dirs.mode.<octal mode>, one for each
venv_directories() {
    local file
    for file; do
        listing_modes=yes squashfs_entries "$file" || return 1
        printf '%s\0' '-'  # (the next layer)
    done | modes=$work/venv-dirs.mode. LC_ALL=C awk '
        BEGIN { RS = "\0"; modes = ENVIRON["modes"] }  # (not -v: a name, its backslashes kept)
        $0 == "-" { next }
        {   type = substr($0, 1, 1); path = substr($0, 12)
            if (kind[path] == "d" && type != "d")  # (what was in a directory it hides goes with it)
                for (known in kind)
                    if (index(known, path "/") == 1) delete kind[known]
            if (type == "c") delete kind[path]; else kind[path] = type
            if (type == "d") mode[path] = substr($0, 2, 9)
        }
        END {
            for (path in kind) {
                if (kind[path] != "d") continue
                printf "%s%c", path, 0
                bits = 0
                for (i = 1; i <= 9; i++) bits = bits * 2 + (substr(mode[path], i, 1) ~ /[rwxst]/)
                if (substr(mode[path], 2, 1) != "w") bits += 128
                if (bits != 493) printf "%s%c", path, 0 > (modes sprintf("%o", bits))
            }
        }' | LC_ALL=C sort -z >"$work/venv-dirs"
}
# Those directories (venv_directories') made in the writable layer's upper directory $1, the caller's, with the
# modes of the venv: where a layer below holds another user's directory, pip may then write in it, as in a venv of
# the caller's own (the overlay lets only a directory's owner write in it)
precreate_venv_directories() {
    local modes
    (cd -- "$1" && xargs -0r mkdir -p -- <"$work/venv-dirs" &&
        for modes in "$work/venv-dirs.mode."*; do
            [ ! -f "$modes" ] || xargs -0r chmod "${modes##*.}" -- <"$modes" || exit 1
        done)
}
# After pip: what precreate_venv_directories made in the upper directory $1 and pip left empty goes, deepest first,
# where it was not emptied by pip (OVERLAY_PYTHON lists those in $1$emptied_record: they hide what is below them)
prune_venv_directories() {
    local emptied="$1$emptied_record"
    [ -f "$emptied" ] || emptied=/dev/null
    # (a directory pip removed is a whiteout now, or gone: rmdir fails there, as on one that is not empty)
    emptied=$emptied LC_ALL=C awk 'BEGIN { RS = "\0"; while ((getline path < ENVIRON["emptied"]) > 0) kept[path] = 1 }
                                        !(("/" $0) in kept) { printf "%s%c", $0, 0 }' "$work/venv-dirs" |
        LC_ALL=C sort -zr | (cd -- "$1" && xargs -0r rmdir --ignore-fail-on-non-empty -- 2>/dev/null) || true
}
# The packages of a personal layer, one a line, sorted: what it adds ("<name> <version>"), or puts in place of the
# install's ("<name> <version> (the install's: <version>)"), and what of the install's it removes ("<name> <version>
# (removed for you)"), from its entries on stdin as squashfs_entries gives them ("<type> <path>", NUL-terminated): a
# dist-info directory of the venv's site-packages that it has, or a whiteout of one
personal_packages() {
    LC_ALL=C awk '
        BEGIN { RS = "\0" }
        /^[dc] user-software\/venv\/[^\/]*\/lib\/python[^\/]*\/site-packages\/[^\/]*\.dist-info$/ {
            count = split($0, part, "/")
            name = part[count]
            sub(/\.dist-info$/, "", name)
            version = name
            sub(/-[^-]*$/, "", name)
            sub(/^.*-/, "", version)
            gsub(/_/, "-", name)
            if (substr($0, 1, 1) == "c") removed[name] = version; else added[name] = version
        }
        END {
            for (name in added) {
                note = ""
                if (name in removed) note = " (the install\047s: " removed[name] ")"
                printf "%s %s%s\n", name, added[name], note
            }
            for (name in removed)
                if (!(name in added)) printf "%s %s (removed for you)\n", name, removed[name]
        }' | LC_ALL=C sort
}
# The personal layer put together in the tree $1, with its whiteouts in the list $2 (NUL-terminated paths; pack_layer's
# before_packing): its packages (personal_packages), recorded at its root as $yours_name for the venv's pip list in
# the container
record_personal_packages() {
    {
        # (personal_packages takes the dist-info directories of the venv's site-packages from these)
        [ ! -d "$1/user-software/venv" ] || (cd -- "$1" && find user-software/venv -mindepth 5 -maxdepth 5 -type d \
            -name '*.dist-info' -printf 'd %p\0')
        LC_ALL=C sed -z 's/^/c /' -- "$2"
    } | personal_packages >"$1/$yours_name" && chmod 644 -- "$1/$yours_name" && return 0
    echo "venv-pip: cannot write $1/$yours_name" >&2
    return 1
}
# venv-pip list --user: the packages of the caller's layer (personal_packages, from its entries: no container), then
# whether the layer is used now
list_personal_layer() {
    local pdir layer
    personal_dir "$module"
    layer=$(current_generation "$pdir")
    if [ -z "$layer" ]; then
        echo "You have no packages of your own on $module (venv-pip install --user adds some)."
        return 0
    fi
    echo "Your own packages on $module (your layer in $pdir):"
    squashfs_entries "$layer/$changes_name" | personal_packages
    check_personal_layer "$(current_generation "$root")"
    [ -z "$personal_refusal" ] || echo "Not used now: $personal_refusal"
}
