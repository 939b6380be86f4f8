"""A real venv for the SquashFS options benchmark: the pinned wheels of bench-wheels.txt from PyPI, installed.

    python benchmarks/real_venv.py fetch DIR     (make bench: download the wheels into DIR, once; network)

Standard library only: make bench runs the download with Debian's Python before anything else. The wheels are
CPython 3.11 manylinux ones whatever the host's Python, so that every machine packs the same tree; the benchmark
installs them with pip --target into a venv made with that Python (bench_squash_options.py).
"""
import hashlib
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent / 'bench-wheels.txt'
PYTHON_VERSION = '3.11'
# The manylinux tags of the pinned wheels (pip takes no lower ones for a given tag): x86_64, glibc 2.34 at most
PLATFORMS = ['manylinux_2_34_x86_64', 'manylinux_2_28_x86_64', 'manylinux_2_27_x86_64', 'manylinux_2_26_x86_64',
             'manylinux_2_17_x86_64', 'manylinux2014_x86_64', 'manylinux_2_12_x86_64', 'manylinux2010_x86_64',
             'manylinux_2_5_x86_64', 'manylinux1_x86_64']


def wheel_options():
    """pip's options for exactly the pinned wheels, for this target whatever runs pip."""
    options = ['--only-binary=:all:', '--no-deps', '--python-version', PYTHON_VERSION, '--implementation', 'cp']
    for platform in PLATFORMS:
        options += ['--platform', platform]
    return options + ['-r', str(REQUIREMENTS)]


def fingerprint():
    """Names the installed venv after the pins, so that a changed list builds a new one."""
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]


def fetch(directory):
    """Download the wheels into directory (pip skips those already there)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, '-m', 'pip', 'download', '-q', '--disable-pip-version-check', '-d', str(directory)]
    subprocess.run(cmd + wheel_options(), check=True)


def install_commands(python, wheels, venv, site_packages):
    """The commands that make venv a real tree: a venv of python, the wheels from the directory wheels (no
    network) in its site-packages, and the .pyc files of every module."""
    pip = [str(Path(venv) / 'bin' / 'python'), '-m', 'pip', '--isolated', '--disable-pip-version-check']
    return [[python, '-m', 'venv', str(venv)],
            pip + ['install', '-q', '--no-index', '--find-links', str(wheels), '--target', str(site_packages)]
            + wheel_options(),
            [str(Path(venv) / 'bin' / 'python'), '-m', 'compileall', '-q', str(venv)]]


if __name__ == '__main__':
    if len(sys.argv) != 3 or sys.argv[1] != 'fetch':
        sys.exit('usage: %s fetch DIR' % sys.argv[0])
    fetch(sys.argv[2])
