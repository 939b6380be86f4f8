# The install dir this script lives in (module loaded or not), and its venv (STATE):
# the script's own constants
root=${BASH_SOURCE[0]}
# (a command's header resolved the path it sources this by: one readlink -f a start)
[ "$root" = "${__library:-}" ] || root=$(readlink -f "$root")
root=${root%/*/*}
dir="$root/$us_dir_name"
packed="$root/$packed_name"  # (the link, see STATE)
