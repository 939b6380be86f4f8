@header@
@remove_leftovers@

@user_software_paths@
@readable_by_all@
@layers@

@lock_install_dir_or_stop@
remove_leftovers "$dir"
[ -f "$squashfs" ] || die "there is no $squashfs to unpack"
[ ! -e "$dir" ] || die "$dir already exists; move it away first, it is not overwritten"
command -v unsquashfs >/dev/null || die "unsquashfs not found on PATH"

tmp="$dir.tmp.$(hostname).$$"
trap 'rm -rf "$tmp"' EXIT
unpack_venv "$tmp" "$changes" || die "unsquashfs failed; nothing was changed"
mv "$tmp/user-software" "$dir"
rmdir "$tmp"
trap - EXIT
echo "Unpacked $squashfs into $dir."
[ ! -f "$changes" ] || echo "It includes the changes in $changes."
echo "To install into it, remove $squashfs and reload the module (module load $module):"
echo "as long as the SquashFS file exists, it is what the container sees as /user-software."
