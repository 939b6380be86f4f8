@header@
@remove_leftovers@

@user_software_paths@
@readable_by_all@

@lock_install_dir_or_stop@
remove_leftovers "$squashfs"
[ ! -e "$squashfs" ] || die "$squashfs already exists; remove it (or run unmake-squashfs and remove it) first"
[ -d "$dir" ] || die "there is no $dir to pack"
command -v mksquashfs >/dev/null || die "mksquashfs not found on PATH"

cpus="${SLURM_CPUS_PER_TASK:-$(nproc)}"
# Written under a temporary name and renamed only on success: an interrupted run leaves no partial image.
tmp="$squashfs.tmp.$(hostname).$$"
trap 'rm -f "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
share_modes "$dir"
echo "Packing $dir into $squashfs with $cpus processors..."
mksquashfs "$dir" "$tmp" -noappend -no-progress -quiet -processors "$cpus" ||
    die "mksquashfs failed; nothing was changed"
# mksquashfs makes its output 0644 whatever the umask: the mode the umask gives (group-writable where the install
# dir is, so that venv-pip keeps it so)
chmod "$(printf %04o $(( 8#666 & ~8#$(umask) )))" "$tmp"
mv "$tmp" "$squashfs"
trap - EXIT
echo "Created $squashfs."
echo "Reload the module (module load $module) to use it as /user-software (read-only)."
echo "$dir can now be removed; unmake-squashfs recreates it from the SquashFS file."
