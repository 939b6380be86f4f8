# The image's Python: python, or python3 in images that have no python (the venv has both)
python=$(command -v python || command -v python3) ||
    { echo "error: the image has neither python nor python3 on its PATH" >&2; exit 1; }
"$python" -c @detect@
if "$python" -c 'import pip' >/dev/null 2>&1; then
    "$python" -m venv --without-pip @venv@
else
    "$python" -m venv @venv@
fi
