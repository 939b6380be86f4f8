"""Real SIF images for the tests, the demo and the benchmarks, with an operating system of their own.

Every image is a layer on top of a minimal Debian 12 root file system (bash, coreutils, python3 with venv and pip),
which `make setup` builds once with mmdebstrap from Debian's packages into $TOOLS/rootfs/bookworm and gives the
/.singularity.d layout of a real build with `apptainer build --sandbox` (environment scripts 01-base to
99-runtimevars, action scripts, libs, runscript, startscript, labels): a real runtime needs it, Apptainer and
SingularityCE set the user's SINGULARITYENV_* variables from 99-base.sh's turn. The layer only adds files to a
hard-linked copy of it (the root file system itself is never changed; a file of the layout that the layer rewrites is
replaced, not written through the link), and the tree is packed into a SIF file either by the real `apptainer build`
(builder='apptainer') or, faster, with mksquashfs and siftool as that build does (builder='siftool').
Where an image's root file system is, is read by the easyblock's own SIF reader (singularitycontainer_src.sif), not
by a copy of it. Stdlib and the easyblock's sources only.

Besides those, make_sbom_sif packs small images that are only read, never run: the files of a LUMI AI Factory image
that generate-ec inspect and releases read.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from singularitycontainer_src.sif import (SIF_FS_SQUASHFS, SIF_PARTITION_DATATYPE, SIF_PARTTYPES_SYSTEM,
                                          sif_partition_offset)

__all__ = ["COTAINR_ENV", "COTAINR_PREFIX", "COTAINR_SITE", "IMAGE_PYTHON", "IMAGE_TOOL_COMMAND", "ROOTFS",
           "build_sif", "image_layer", "make_sbom_sif", "make_test_sif", "sif_partition_offset", "write_distribution"]

TOOLS = Path(os.environ.get("LUMI_CT_TOOLS", "/opt/lumi-container-tools"))
ROOTFS = TOOLS / "rootfs" / "bookworm"
APPTAINER = TOOLS / "apptainer" / "bin" / "apptainer"
ENVIRONMENT_SCRIPT = ".singularity.d/env/90-environment.sh"
# siftool's arguments for the root file system, the partition the easyblock's reader looks for: a partition (SIF
# datatype 0x4004, siftool's 4), SquashFS, the primary system partition, for amd64 (siftool's 2)
SIFTOOL_ROOTFS_PARTITION = ["--datatype", str(SIF_PARTITION_DATATYPE & 0xff), "--partfs", str(SIF_FS_SQUASHFS),
                            "--parttype", str(SIF_PARTTYPES_SYSTEM[0]), "--partarch", "2"]
IMAGE_PYTHON = "/usr/bin/python3"  # Debian's, also on PATH as python (python-is-python3)

# Sourced as `source /opt/miniconda3/bin/activate ENV`, like conda's script.
_ACTIVATE = """\
# Minimal stand-in for conda's activate script (meant to be sourced).
if [ "${1:-}" = "pytorch" ]; then
    PATH="/opt/miniconda3/envs/pytorch/bin:$PATH"
    CONDA_PREFIX=/opt/miniconda3/envs/pytorch
    CONDA_DEFAULT_ENV=pytorch
    export PATH CONDA_PREFIX CONDA_DEFAULT_ENV
else
    echo "EnvironmentNameNotFound: Could not find conda environment: ${1:-}" >&2
    return 1
fi
"""

_DEFAULT_RUNSCRIPT = """\
#!/bin/sh
# Test image runscript: runs its arguments, or a shell.
if [ "$#" -eq 0 ]; then
    exec /bin/sh
fi
exec "$@"
"""

# The LUMI AI Factory images' runscript (through 20260415): settings for a single node, then the command.
LAIF_RUNSCRIPT = """\
#!/bin/sh
# Test image runscript, like the LUMI AI Factory images': set things up, then run the command.
if [ "${SLURM_NNODES:-}" = 1 ] && [ -z "${SLURM_GPUS_ON_NODE:-}" ]; then
    export FI_HMEM_DISABLE_P2P=1
fi
export LAIF_RUNSCRIPT_RAN=yes
exec "$@"
"""


def _run(cmd, **kwargs):
    r = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       **kwargs)
    if r.returncode:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout}")
    return r.stdout


# The test images' SquashFS compression: lz4, which the runtimes read as they read the gzip of the sites' images
# (apptainer build's default), only faster: Python, and pip most, start about 1.7 times as fast from it in either mode
# (lz4 ~ no compression; gzip level 1 reads 3 times the CPU time of lz4), and every test starts many; an image is 30%
# larger than with gzip level 1. tests/test_runtimes.py runs an image of the default compression.
IMAGE_COMPRESSION = ("-comp", "lz4")


def build_sif(rootfs: Path, sif: Path, builder: str = "siftool", partition: bool = True,
              compression: tuple = IMAGE_COMPRESSION) -> Path:
    """Pack directory `rootfs` into a SIF file at `sif` (overwritten), with `apptainer build` or, as it does it,
    with mksquashfs and siftool (a SquashFS root file system partition in a new SIF file), compressed with
    `compression`, mksquashfs's options (none: its default, gzip, as in the sites' images). partition=False
    (siftool only): a SIF file without any data object, a broken image."""
    sif = Path(sif)
    if sif.exists():
        sif.unlink()
    if builder == "apptainer":
        _run([APPTAINER, "--quiet", "build"] + ["--mksquashfs-args", " ".join(compression)] * bool(compression) +
             [sif, rootfs])
        return sif
    if not partition:
        _run(["siftool", "new", sif])
        return sif
    fd, sqfs = tempfile.mkstemp(suffix=".sqfs", dir=sif.parent)
    os.close(fd)
    try:
        _run(["mksquashfs", rootfs, sqfs, "-noappend", "-quiet", "-no-progress", "-all-root", *compression])
        _run(["siftool", "new", sif])
        _run(["siftool", "add"] + SIFTOOL_ROOTFS_PARTITION + [sif, sqfs])
    finally:
        os.unlink(sqfs)
    return sif


def make_sbom_sif(directory: Path, name: str, sbom: dict | None = None, sbom_text: str | None = None,
                  python_dirs: tuple = ("python3.12",), partition: bool = True) -> str:
    """A small LAIF-like SIF for what generate-ec reads from an image without running it (inspect, releases):
    /.sbom.json (`sbom` as JSON, or `sbom_text` as it is; none if neither) and
    /opt/venv/lib/<python_dirs>/site-packages, packed by build_sif in a new directory below `directory` as `name`;
    partition=False: a SIF without its root file system. Not a runnable image (no operating system)."""
    directory = Path(directory) / ("image-%d" % len(os.listdir(directory)))
    tree = directory / "tree"
    tree.mkdir(parents=True)
    for python in python_dirs:
        (tree / "opt" / "venv" / "lib" / python / "site-packages").mkdir(parents=True)
    if sbom is not None or sbom_text is not None:
        (tree / ".sbom.json").write_text(sbom_text if sbom_text is not None else json.dumps(sbom))
    return str(build_sif(tree, directory / name, partition=partition))


# The image's own tool, a distribution with a console script in every test image: it says which Python runs it
# and what that Python imports (as torchrun or accelerate would run with the image's Python or the venv's).
IMAGE_TOOL, IMAGE_TOOL_COMMAND = "image-tools", "image-report"
IMAGE_TOOL_CODE = """import importlib
import json
import sys


def main():
    \"\"\"Print this Python's prefix and the VERSION of each module named in the arguments (None: no such module).\"\"\"
    found = {}
    for name in sys.argv[1:]:
        try:
            found[name] = getattr(importlib.import_module(name), "VERSION", "imported")
        except ImportError:
            found[name] = None
    print(json.dumps([sys.prefix, found]))
"""


def write_distribution(site: Path, name: str, version: str, code: str = "", commands: tuple = (),
                       python: str = "", entry_points: dict | None = None) -> None:
    """An installed pure-Python distribution: module `name` (dashes as underscores) with VERSION (and `code`), and
    its dist-info; each of `commands` a console script calling the module's main(), installed as pip does it (a
    script in the environment's bin/ run by `python`, listed in RECORD); `entry_points` ({name: 'module:attr
    [extras]'}) console scripts without a script, as in a directory of pip install --target on PYTHONPATH."""
    module = name.replace("-", "_")
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text("VERSION = %r\n%s" % (version, code))
    info = site / ("%s-%s.dist-info" % (module, version))
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
    (info / "INSTALLER").write_text("pip\n")
    record = []
    points = dict({command: "%s:main" % module for command in commands}, **(entry_points or {}))
    if points:
        (info / "entry_points.txt").write_text("[console_scripts]\n" + "".join(
            "%s = %s\n" % point for point in points.items()))
    for command in commands:
        script = site / "../../../bin" / command
        script.write_text("#!%s\nimport sys\nfrom %s import main\nif __name__ == '__main__':\n    sys.exit(main())\n"
                          % (python, module))
        script.chmod(0o755)
        record.append("../../../bin/%s,," % command)
    (info / "RECORD").write_text("".join(line + "\n" for line in record))


def _debian_packages(root: Path) -> dict:
    """{package: version} of the image's Debian packages (dpkg's status file)."""
    status = (root / "var/lib/dpkg/status").read_text()
    return dict(re.findall(r"^Package: (\S+)\n(?:[^\n]+\n)*?Version: (\S+)$", status, re.M))


def _image_python(root: Path) -> tuple:
    """The image's Python: (major.minor, the Debian package's version)."""
    short = sorted(p.name[len("python"):] for p in (root / "usr/lib").glob("python3.*") if p.is_dir())[-1]
    return short, _debian_packages(root)["python" + short]


def _add_conda(root: Path, lines: list) -> None:
    """A `pytorch` environment that must be activated first ($WITH_CONDA), like the AMD images before 2025."""
    bindir = root / "opt/miniconda3/envs/pytorch/bin"
    bindir.mkdir(parents=True)
    for alias in ("python", "python3"):
        (bindir / alias).symlink_to(IMAGE_PYTHON)
    (root / "opt/miniconda3/bin").mkdir(parents=True)
    (root / "opt/miniconda3/bin/activate").write_text(_ACTIVATE)
    lines.append("export WITH_CONDA='source /opt/miniconda3/bin/activate pytorch'")


def _make_venv(root: Path, path: str, short: str, version: str) -> None:
    """A venv of the image's Python at `path`, as `python3 -m venv` makes it, with the image's pip in it (as of
    Python 3.12, LAIF's: no setuptools)."""
    venv = root / path.lstrip("/")
    site = venv / "lib" / ("python" + short) / "site-packages"
    site.mkdir(parents=True)
    (venv / "lib64").symlink_to("lib")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\nversion = %s\n"
                                     "executable = /usr/bin/python%s\ncommand = /usr/bin/python3 -m venv %s\n"
                                     % (version, short, path))
    (venv / "bin").mkdir()
    (venv / "bin/python").symlink_to(IMAGE_PYTHON)
    for alias in ("python3", "python" + short):
        (venv / "bin" / alias).symlink_to("python")
    for name in ("pip", "pip3", "pip" + short):
        (venv / "bin" / name).write_text("#!%s/bin/python\nimport sys\nfrom pip._internal.cli.main import main\n"
                                         "sys.exit(main())\n" % path)
        (venv / "bin" / name).chmod(0o755)
    dist_packages = root / "usr/lib/python3/dist-packages"
    for entry in dist_packages.iterdir():
        if entry.name == "pip" or (entry.name.startswith("pip-") and entry.name.endswith(".dist-info")):
            shutil.copytree(entry, site / entry.name, symlinks=True)


def _add_laif(root: Path, lines: list, packages: dict, pythonpath: tuple, sbom_pip) -> None:
    """/opt/venv as in the LUMI AI Factory images: a venv of the image's Python (with pip) holding `packages`
    ({name: version}), on PATH and on PYTHONPATH; a runscript that sets a variable and ends in exec "$@"; and a
    /.sbom.json listing the packages (or sbom_pip)."""
    short, deb_version = _image_python(root)
    site = "/opt/venv/lib/python%s/site-packages" % short
    _make_venv(root, "/opt/venv", short, deb_version.split("-")[0])
    for name, pkg_version in packages.items():
        write_distribution(root / site.lstrip("/"), name, pkg_version)
    write_distribution(root / site.lstrip("/"), IMAGE_TOOL, "1.0", IMAGE_TOOL_CODE, (IMAGE_TOOL_COMMAND,),
                       "/opt/venv/bin/python")
    lines.append('export PATH="/opt/venv/bin:$PATH"')
    lines.append('export PYTHONPATH="%s:$PYTHONPATH"' % ":".join((site,) + tuple(pythonpath)))
    sbom = {"apt": [{"name": "python" + short, "version": deb_version},
                    {"name": "rocm-core", "version": "6.4.4.60404-129~24.04"}],
            "pip": [{"name": name, "version": pkg_version}
                    for name, pkg_version in sorted((packages if sbom_pip is None else sbom_pip).items())]}
    (root / ".sbom.json").write_text(json.dumps(sbom) + "\n")


# cotainr's layout (cotainr 2025.7.1: pack.CondaInstall, cli.Build, container.SingularitySandbox): conda installed
# at /opt/cotainr/conda, the user's environment created as conda_container_env, and the image's environment script
# 92-cotainr-env.sh, which sources conda's shell functions and activates the environment in every container
COTAINR_PREFIX = "/opt/cotainr/conda"
COTAINR_ENV = "conda_container_env"
COTAINR_ENV_SCRIPT = ".singularity.d/env/92-cotainr-env.sh"
COTAINR_SITE = "%s/envs/%s/lib/python{python}/site-packages" % (COTAINR_PREFIX, COTAINR_ENV)

# Stand-in for conda's etc/profile.d/conda.sh (no conda here: it is installed from the network). What it does for
# `conda activate NAME`, as conda's does from a shell with no environment active: the environment's bin/ first on
# PATH, conda's condabin/ after it, CONDA_PREFIX, CONDA_DEFAULT_ENV, CONDA_SHLVL and CONDA_PROMPT_MODIFIER set, the
# environment's etc/conda/activate.d/*.sh sourced; an unknown name is an error. POSIX sh, as the runtime's shell
# sources the environment scripts.
_COTAINR_CONDA_SH = """\
# Stand-in for conda's conda.sh: conda activate only (the test kit has no conda).
CONDA_EXE=%(prefix)s/bin/conda
export CONDA_EXE
conda() {
    if [ "${1:-}" != activate ] || [ "$#" -ne 2 ]; then
        echo "conda (test stand-in): only 'conda activate NAME' is here" >&2
        return 2
    fi
    if [ ! -d "%(prefix)s/envs/$2/conda-meta" ]; then
        echo "EnvironmentNameNotFound: Could not find conda environment: $2" >&2
        return 1
    fi
    PATH="%(prefix)s/envs/$2/bin:%(prefix)s/condabin${PATH:+:$PATH}"
    CONDA_PREFIX="%(prefix)s/envs/$2"
    CONDA_DEFAULT_ENV="$2"
    CONDA_SHLVL=1
    CONDA_PROMPT_MODIFIER="($2) "
    export PATH CONDA_PREFIX CONDA_DEFAULT_ENV CONDA_SHLVL CONDA_PROMPT_MODIFIER
    for script in "$CONDA_PREFIX"/etc/conda/activate.d/*.sh; do
        if [ -f "$script" ]; then
            . "$script"
        fi
    done
}
""" % {"prefix": COTAINR_PREFIX}


def _add_cotainr(root: Path, packages: dict) -> None:
    """A conda environment as cotainr builds it (COTAINR_*), holding `packages` ({name: version}) and the image's
    tool, activated by 92-cotainr-env.sh as cotainr writes it; cotainr's labels. Stand-ins, as there is no conda
    here: conda.sh (_COTAINR_CONDA_SH) and the environment, a venv of the image's Python at the environment's path
    with conda's conda-meta/ (a conda environment is a Python prefix of its own; the venv gives the same sys.prefix,
    bin/ and site-packages), and an activate.d script that sets a variable, as conda packages' scripts do."""
    short, deb_version = _image_python(root)
    env = "%s/envs/%s" % (COTAINR_PREFIX, COTAINR_ENV)
    _make_venv(root, env, short, deb_version.split("-")[0])
    (root / env.lstrip("/") / "conda-meta").mkdir()
    (root / env.lstrip("/") / "conda-meta" / "history").write_text("==> cotainr test stand-in <==\n")
    activate_d = root / env.lstrip("/") / "etc/conda/activate.d"
    activate_d.mkdir(parents=True)
    (activate_d / "cotainr-test.sh").write_text("export COTAINR_ENV_ACTIVATED=\"$CONDA_DEFAULT_ENV\"\n")
    site = root / COTAINR_SITE.format(python=short).lstrip("/")
    for name, pkg_version in packages.items():
        write_distribution(site, name, pkg_version)
    write_distribution(site, IMAGE_TOOL, "1.0", IMAGE_TOOL_CODE, (IMAGE_TOOL_COMMAND,), env + "/bin/python")
    conda = root / COTAINR_PREFIX.lstrip("/")
    (conda / "etc/profile.d").mkdir(parents=True)
    (conda / "etc/profile.d/conda.sh").write_text(_COTAINR_CONDA_SH)
    (conda / "condabin").mkdir()
    _replace(root / COTAINR_ENV_SCRIPT, "source %s/etc/profile.d/conda.sh\nconda activate %s\n"
             % (COTAINR_PREFIX, COTAINR_ENV), 0o644)
    labels = root / ".singularity.d/labels.json"
    metadata = json.loads(labels.read_text()) if labels.exists() else {}
    metadata.update({"cotainr.command": "cotainr build cotainr.sif --base-image=docker://debian:12 "
                                        "--conda-env=env.yml", "cotainr.version": "2025.7.1",
                     "cotainr.url": "https://github.com/DeiC-HPC/cotainr"})
    _replace(labels, json.dumps(metadata), 0o644)


def _replace(path: Path, text: str, mode: int = 0o755) -> None:
    """Write a file of the layout anew (a new inode: the hard-linked original in ROOTFS stays as it is)."""
    if path.exists():
        path.unlink()
    path.write_text(text)
    path.chmod(mode)


def _write_layout(root: Path, lines: list, runscript: str) -> None:
    """The image's own part of /.singularity.d, as a build writes it from a definition file: its environment
    (%environment, after the header of the build's 90-environment.sh) and its runscript (%runscript)."""
    environment = root / ENVIRONMENT_SCRIPT
    _replace(environment, environment.read_text() + "\n".join(lines) + "\n")
    _replace(root / ".singularity.d/runscript", runscript)


def image_layer(root: Path, *, conda: bool = False, laif: dict | None = None, laif_pythonpath: tuple = (),
                sbom_pip: dict | None = None, cotainr: dict | None = None, env: dict | None = None,
                trees: dict | None = None, python_command: bool = True) -> Path:
    """Write a test image's layer into `root`, the image tree (the root file system under an overlay).

    By default the image mimics the AMD images from 2025 on (Python on PATH); conda=True the ones before 2025 (a
    `pytorch` environment to activate first, $WITH_CONDA); laif={name: version} the LUMI AI Factory images (see
    _add_laif); cotainr={name: version} an image that cotainr built, with a conda environment holding them (see
    _add_cotainr). `env` adds exports to the image's environment script, `trees` copies host directories into it
    ({path in the image: host directory}). python_command=False leaves out `python` (python3 only, as in images
    without Debian's python-is-python3).
    """
    lines = ["# Test image environment"]
    runscript = _DEFAULT_RUNSCRIPT
    if laif is not None:
        _add_laif(root, lines, laif, laif_pythonpath, sbom_pip)
        runscript = LAIF_RUNSCRIPT
    elif cotainr is not None:
        _add_cotainr(root, cotainr)
    else:  # the image's tool in its system Python
        write_distribution(root / "usr/lib/python3/dist-packages", IMAGE_TOOL, "1.0", IMAGE_TOOL_CODE,
                           (IMAGE_TOOL_COMMAND,), IMAGE_PYTHON)
    if conda:
        _add_conda(root, lines)
    for key, value in (env or {}).items():
        lines.append(f"export {key}={shlex.quote(str(value))}")
    if not python_command:
        (root / "usr/bin/python").unlink()
    for target, source in (trees or {}).items():
        shutil.copytree(source, root / target.lstrip("/"), symlinks=True, dirs_exist_ok=True)
    _write_layout(root, lines, runscript)
    return root


def make_test_sif(dest: Path, builder: str = "siftool", compression: tuple = IMAGE_COMPRESSION, **layer) -> Path:
    """A SIF image at `dest`, packed by `builder` (see build_sif): the Debian root file system with
    image_layer(**layer) on top. The layer only adds files, so the image tree can share the root file system's
    files (hard links; a copy on another file system)."""
    if not (ROOTFS / ENVIRONMENT_SCRIPT).exists():
        raise RuntimeError(f"no root file system with a /.singularity.d layout in {ROOTFS}; make setup builds it")
    dest = Path(dest)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        root = Path(tmp) / "root"
        if subprocess.run(["cp", "-al", ROOTFS, root], capture_output=True).returncode:
            shutil.rmtree(root, ignore_errors=True)
            _run(["cp", "-a", ROOTFS, root])
        image_layer(root, **layer)
        return build_sif(root, dest, builder, compression=compression)
