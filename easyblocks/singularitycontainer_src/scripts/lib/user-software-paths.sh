# The install dir this script lives in (module loaded or not), and its venv (STATE):
# the script's own constants
root=$(readlink -f "${BASH_SOURCE[0]}")
root=${root%/*/*}
dir="$root/$us_dir_name"
packed="$root/$packed_name"  # (the link, see STATE)
