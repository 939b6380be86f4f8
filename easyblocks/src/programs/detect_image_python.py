
import importlib.util
import json
import os
import sys
import sysconfig
stdlib = {os.path.normpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")}
stdlib |= {os.path.join(path, "lib-dynload") for path in stdlib}
package_dirs = []
for entry in sys.path:
    path = os.path.normpath(entry) if entry else ""
    if os.path.isabs(path) and os.path.isdir(path) and path not in package_dirs and path not in stdlib:
        package_dirs.append(path)
kind = "venv" if sys.prefix != sys.base_prefix else \
    "conda" if os.path.isdir(os.path.join(sys.prefix, "conda-meta")) else "system"
print("IMAGE-PYTHON " + json.dumps({
    "version": "%d.%d" % sys.version_info[:2], "executable": sys.executable, "prefix": sys.prefix,
    "kind": kind, "package_dirs": package_dirs, "pip": importlib.util.find_spec("pip") is not None}))
