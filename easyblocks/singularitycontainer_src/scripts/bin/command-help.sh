# -h or --help as the first argument: what this command does and takes, before anything is started
case "${1:-}" in
    -h | --help) print_help ;;
    *) ;;
esac
