"""The sanity check in the container.

Checks the Python version, the components and the requirements given as JSON: in CHECKS, where the easyblock puts
them when it gives this program to python on stdin (a short command line for EasyBuild to show), else on stdin.
Prints what is wrong (exit status 1), else that the checks passed."""
import importlib.metadata
import io
import json
import subprocess
import sys

CHECKS = None  # (the checks as JSON text: the easyblock's container_check_command sets it)


def problems(checks):
    """What is wrong in this Python, one message each."""
    errors = []
    version = "%d.%d" % sys.version_info[:2]
    if checks["python"] and version != checks["python"]:
        errors.append("Python %s in the container, expected %s" % (version, checks["python"]))
    wanted = list(checks["components"].items()) + [(name, None) for name in checks["requirements"]]
    for name, want in wanted:
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            errors.append("%s is not installed" % name)
            continue
        if want and have != want and ("+" in want or have.split("+")[0] != want):
            errors.append("%s is version %s, expected %s" % (name, have, want))
    if checks["requirements"]:
        pip_check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
        if pip_check.returncode:
            errors.append("pip check failed: " + pip_check.stdout + pip_check.stderr)
    return errors


def main(stdin):
    errors = problems(json.load(stdin))
    print("\n".join(errors) or "container checks passed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(io.StringIO(CHECKS) if CHECKS is not None else sys.stdin))
