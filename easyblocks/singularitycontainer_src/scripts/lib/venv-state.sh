# The packed venv's state (docs/design.md), with FILES.
# The link $1/$packed_name names a generation: a directory $1/$generation_prefix + XXXXXX (from mktemp)
# holding $squashfs_name and, where the install stacks layers, $changes_name on top of it.
# The form of the venv is recorded there, in $form_record, by the command that made the generation, and read from
# there by the scripts, the module and the easyblock: layers (both files) or one SquashFS file; with no link, the
# directory $us_dir_name/ (also when both are there after unmake-squashfs: the link wins, as in the module).
# A generation is never changed once the link names it. A change makes a new one beside it (a SquashFS file that
# stays is a hard link, no copy) and renames a new link over the old one: one rename(2), so a kill at any moment
# leaves the old state or the new one, and a container started through the module's commands gets both files of one
# state (pinned_entries). What no link names is removed $keep_minutes minutes after it was superseded, by whoever
# changes the venv next: a container that resolved the link just before still finds its files.
# A node may crash at any moment, with what was written still in its memory (a Lustre client's, or an ext4 that has
# not written its data back): the new generation's files and directory are on disk before the rename, and the rename
# is before the command says it is done. An earlier state is removed only while the current one's files are whole.

current_generation() {  # the generation the link of the install dir $1 names (a path), or nothing
    local name
    name=$(readlink -- "$1/$packed_name") || return 0
    case "$name" in
        "$generation_prefix"*/* | */*) return 0 ;;
        "$generation_prefix"?*) [ -d "$1/$name" ] && [ ! -L "$1/$name" ] && echo "$1/$name" ;;
    esac
    return 0
}
venv_form() {  # layers, file, directory or missing: the venv of the install dir $1 with its generation $2 (or '')
    local form='' squashfs=no changes=no directory=no
    if [ -n "$2" ]; then
        if [ -f "$2/$form_record" ] && [ ! -L "$2/$form_record" ]; then
            read_start form "$2/$form_record" 16
        fi
        [ ! -f "$2/$squashfs_name" ] || squashfs=yes
        [ ! -f "$2/$changes_name" ] || changes=yes
    fi
    [ ! -d "$1/$us_dir_name" ] || directory=yes
    # the recorded form, where its files are there; else (a generation of an earlier version, with no record, or a
    # file deleted) what the files say
    case "$form:$squashfs:$changes" in
        layers:yes:yes | file:yes:*) echo "$form" ;;
        *:yes:yes) echo layers ;;
        *:yes:no) echo file ;;
        *) [ "$directory" = yes ] && echo directory || echo missing ;;
    esac
}
record_form() {  # the form $2 (layers or file) of the new generation $1, which the readers take from there
    echo "$2" >"$1/$form_record"
}
# A new, empty generation in the install dir $1: its path. It stays private (mktemp's 0700) until make_current gives
# it the umask's mode: in a project's install, a member who saw it appear could otherwise put links at the names
# written into it (the record, the SquashFS files) and have them written through.
new_generation() {
    local generation
    generation=$(new_private_dir "$1" "$generation_prefix") || return 1
    if ! run_record >"$generation/$generation_record"; then
        remove_own_tree "$generation"
        return 1
    fi
    echo "$generation"
}
make_current() {  # the generation $2 becomes the state of the install dir $1: one rename of a new link over the old
    local link superseded files=() file
    superseded=$(current_generation "$1")
    # (whole now: for whoever may read the install dir, and removable by the next member's change once superseded)
    chmod "$(umask_mode 777)" "$2" || return 1
    link=$(new_link "${2##*/}" "$1" "$link_prefix") || return 1
    # on disk before the link names them: the generation's files, its directory, and its entry and the new link's
    for file in "$2"/* "$2"/.*; do  # (the names this run gave them: no process to list them)
        [ ! -f "$file" ] || [ -L "$file" ] || files+=("$file")
    done
    if ! sync -- "${files[@]}" "$2" "$1"; then
        rm -f -- "$link"
        return 1
    fi
    rename_into_place "$link" "$1/$packed_name" || return 1
    # (and the rename: the change is made even if this flush fails, which it then says)
    sync -- "$1" || true
    # the clock of its removal starts now (remove_superseded)
    [ -z "$superseded" ] || touch -c -- "$superseded" 2>/dev/null || true
}
# What an earlier change left in the install dir $1 that no link names any more: generations superseded more than
# $keep_minutes minutes ago, a new one whose run was killed, and that run's link. Only real directories made as
# generations (with their record) and links of the link's pattern; nothing is followed. Say what cannot be removed.
# $2: the current generation, where the caller read it under the install's lock.
remove_superseded() {
    local current entry whole=''
    if [ "$#" -ge 2 ]; then
        current=$2
    else
        current=$(current_generation "$1")
    fi
    # (the old ones in one look: a find for each would cost a process each)
    while IFS= read -r -d '' entry; do
        [ "$entry" != "$current" ] || continue
        # (what a crash left unwritten in the current state: the earlier ones stay, the way back to a whole one)
        if [ -z "$whole" ]; then
            generation_whole "$current" || return 0
            whole=yes
        fi
        case "$entry" in
            "$1/$link_prefix"*) [ ! -L "$entry" ] || [ ! -O "$entry" ] || rm -f -- "$entry" ;;
            *)
                if [ ! -L "$entry" ] && [ -d "$entry" ] && [ ! -O "$entry" ] && [ ! -x "$entry" ]; then
                    # (a generation is private to its maker until it is made current: one that never was)
                    # (its name is another user's choice: printed as text, and quoted for the shell)
                    echo "${0##*/}: warning: $(printable "$entry") is what a killed venv-pip, make-squashfs or" \
                        "unmake-squashfs of $(stat -c %U -- "$entry") left, private to them: only they can remove it" \
                        "(rm -rf $(printable "$(printf %q "$entry")"))" >&2
                    continue
                fi
                if [ ! -L "$entry" ] && [ -d "$entry" ] && [ -f "$entry/$generation_record" ] &&
                    [ ! -L "$entry/$generation_record" ] &&
                    [ "$(stat -c %u -- "$entry")" = "$(stat -c %u -- "$entry/$generation_record")" ]; then
                    rm -rf --one-file-system -- "$entry" 2>/dev/null ||
                        echo "${0##*/}: warning: cannot remove $(printable "$entry"), an old state of the venv" \
                            "($(stat -c %U -- "$entry")'s): remove it when no job runs from it" >&2
                fi
                ;;
        esac
    done < <(find "$1" -mindepth 1 -maxdepth 1 \( -name "$generation_prefix*" -o -name "$link_prefix*" \) \
        -mmin "+$keep_minutes" -print0 2>/dev/null)
}
# Whether the file $1 is a whole SquashFS file, as far as a glance tells: its magic, and as long as its superblock
# says it is (a node that crashed before it wrote the file back leaves it empty or short); $2 "quick": its magic only
# (no process started: a wrapper checks at every start)
squashfs_whole() {
    local magic='' used
    [ -f "$1" ] || return 1  # (reading a FIFO would wait)
    { read -r -n 4 magic <"$1"; } 2>/dev/null
    [ "$magic" = hsqs ] || return 1
    [ "${2:-}" != quick ] || return 0
    used=$(od -An -j 40 -N 8 -t u8 -- "$1") || return 1
    [ "$(stat -c %s -- "$1")" -ge "${used//[^0-9]/}" ]
}
# Whether the SquashFS files of the generation $1 are whole (squashfs_whole, $2 as there); no generation (no packed
# venv) is
generation_whole() {
    local file
    [ -n "$1" ] || return 0
    for file in "$1/$squashfs_name" "$1/$changes_name"; do
        [ ! -e "$file" ] || squashfs_whole "$file" "${2:-}" || return 1
    done
}
# What to say when the packed venv's current state, the generation $2 of the install dir $1, is not whole
# (generation_whole): which earlier state the link can name instead
damaged_state() {
    local earlier='' way='' entry
    # (the latest superseded one: make_current touched it; the damaged one's name compared as it is, never a pattern)
    while IFS= read -r -d '' entry; do
        [ "${entry#* }" = "${2##*/}" ] || { earlier=$entry; break; }
    done < <(find "$1" -mindepth 1 -maxdepth 1 -type d -name "$generation_prefix*" -printf '%T@ %f\0' | sort -zrn)
    if [ -n "$earlier" ]; then
        # (a name that another member may have chosen: quoted for the shell, and printable)
        way="make the link name the state before it (ln -sfnT $(printable "$(printf %q "${earlier#* }")")"
        way+=" $1/$packed_name, then check with"
        way+=" list-packages), or "
    fi
    echo "the packed venv's state ${2##*/} is damaged (its SquashFS files are empty or short: did a node crash" \
        "before they were written?): ${way}reinstall the module (eb --rebuild)"
}
# Whether the path $2 names a file through the link of the install dir $1 (gone or not). ($1 is as readlink -f gives
# it, as root is: where $2 names it as it is, no process is needed to tell.)
through_the_link() {
    [ "${2%/*}" != "$2" ] && [ "${2%/*/*}/$packed_name" = "${2%/*}" ] &&
        { [ "${2%/*/*}" = "$1" ] || [ "$(readlink -f -- "${2%/*/*}")" = "$1" ]; }
}
of_the_packed_venv() {  # whether the path $2 is a file of the packed venv of the install dir $1, of any generation
    local real=$2
    ! through_the_link "$1" "$2" || return 0  # (the module's own entries: no process)
    # (one a command pinned is there as it is: no process either)
    resolves_to_itself "$2" || real=$(readlink -f -- "$2" 2>/dev/null) || return 1
    case "$real" in
        "$1/$generation_prefix"*/*) return 0 ;;
        *) return 1 ;;
    esac
}
# How venv-pip's change gets the writable layer on top of the layers of the generation $1, as make-squashfs decided it
# by what the runtime allows: a directory (an overlay in a user namespace), or an EXT3 image (a setuid runtime lets
# only root use a directory); a directory where nothing is recorded (installs of earlier versions)
writable_layer_kind() {
    local kind=
    if [ -f "$1/$writable_record" ] && [ ! -L "$1/$writable_record" ]; then
        read_start kind "$1/$writable_record" 64
    fi
    [ "$kind" = image ] && echo image || echo directory
}
record_writable_layer_kind() {  # the kind $2 for the new generation $1
    echo "$2" >"$1/$writable_record"
}
mark_empty_layer() {  # the layer of the new generation $1 changes nothing: a command of the module leaves it out
    : >"$1/$empty_mark"
}
# The list $3 (SINGULARITY_BINDPATH or _OVERLAY's form) with the entries that go through the link of the install dir
# $1 pointed at its generation $2 (without an empty layer): the module names them through the link, so that new jobs
# get every change without a reload, and a container started by a command of the module gets one state whole. In
# pinned (no process: a wrapper pins at every start).
pinned=''
# shellcheck disable=SC2154,SC2034  # bind_source: bind_fields' (bind-user-software.sh); pinned: the callers'
pinned_entries() {
    local IFS=, entry entries kept=() path
    read -ra entries <<<"$3"
    for entry in "${entries[@]}"; do
        bind_fields "$entry"
        path=$bind_source
        if [ -n "$2" ] && through_the_link "$1" "$path"; then
            entry="$2/${entry#"${path%/*}"/}"
            # (an empty layer: one mount less at each start)
            [ "${path##*/}" != "$changes_name" ] || [ ! -e "$2/$empty_mark" ] || continue
        fi
        kept+=("$entry")
    done
    pinned="${kept[*]}"
}
