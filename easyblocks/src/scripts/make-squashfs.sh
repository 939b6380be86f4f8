@header@
@remove_leftovers@

@user_software_paths@
@readable_by_all@
@layers@

@lock_install_dir_or_stop@
remove_leftovers "$squashfs"
remove_leftovers "$changes"
[ ! -e "$squashfs" ] || die "$squashfs already exists; remove it (or run unmake-squashfs and remove it) first"
[ -d "$dir" ] || die "there is no $dir to pack"
command -v mksquashfs >/dev/null || die "mksquashfs not found on PATH"

# This install stacks layers (it has $changes), or its installation asks for them: checked below
layers=
# shellcheck disable=SC2198  # @try_layers@ is a variable name, filled at install
if [ -f "$changes" ] || [ "${@try_layers@:-}" = yes ]; then
    layers=yes
fi

# Written under a temporary name and renamed only on success: an interrupted run leaves no partial image.
tmp="$squashfs.tmp.$(hostname).$$"
tmp_changes="$changes.tmp.$(hostname).$$"
trap 'rm -f "$tmp" "$tmp_changes"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
share_modes "$dir"
echo "Packing $dir into $squashfs with $cpus processors..."
# (user-software/ from the container's root: a layer, see LAYERS)
mksquashfs "$dir" "$tmp" "${squash_options[@]}" -keep-as-directory >/dev/null ||
    die "mksquashfs failed; nothing was changed"
[ -z "$layers" ] || empty_layer "$tmp_changes" || die "cannot write $tmp_changes; nothing was changed"
# mksquashfs makes its output 0644 whatever the umask: the mode the umask gives (group-writable where the install
# dir is, so that venv-pip keeps it so)
chmod "$(printf %04o $(( 8#666 & ~8#$(umask) )))" "$tmp" ${layers:+"$tmp_changes"}
mv "$tmp" "$squashfs"
echo "Created $squashfs."
if [ -n "$layers" ]; then
    mv "$tmp_changes" "$changes"
    # shellcheck disable=SC2124  # @sif_var@ is a variable name (SIF or SIF<NAME>), filled at install
    if ! why=$(layers_stack "${@image_var@:-${@sif_var@:-}}"); then
        rm -f "$changes"
        echo "venv-pip will repack the whole venv for each change: the container runtime does not stack" \
            "$squashfs and a layer on top as overlays here ($why)."
    fi
fi
trap - EXIT
echo "Reload the module (module load $module) to use it as /user-software (read-only)."
echo "$dir can now be removed; unmake-squashfs recreates it from the SquashFS file."
