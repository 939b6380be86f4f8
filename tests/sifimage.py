"""Build tiny, real SIF images for tests (stdlib only).

The images contain no OS: the singularity stand-in (tests/standin/singularity)
runs them on the host userland, so the Python inside is a symlink to a real
host interpreter.
"""
import json
import os
import shlex
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

__all__ = ["build_sif", "make_test_rootfs", "make_test_sif", "sif_partition_offset"]

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


def _run(cmd):
    r = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout}")


def build_sif(rootfs: Path, sif: Path) -> Path:
    """Pack directory `rootfs` into a SIF file at `sif` (overwritten)."""
    sif = Path(sif)
    if sif.exists():
        sif.unlink()
    fd, sqfs = tempfile.mkstemp(suffix=".sqfs", dir=sif.parent)
    os.close(fd)
    try:
        _run(["mksquashfs", rootfs, sqfs, "-noappend", "-quiet", "-all-root"])
        _run(["siftool", "new", sif])
        _run(["siftool", "add", "--datatype", "4", "--partfs", "1", "--parttype", "2",
              "--partarch", "2", sif, sqfs])
    finally:
        os.unlink(sqfs)
    return sif


def _link_pythons(bindir: Path, python: str) -> None:
    ver = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    bindir.mkdir(parents=True)
    (bindir / "python").symlink_to(python)
    for alias in ("python3", f"python{ver}"):
        (bindir / alias).symlink_to("python")


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


def _python_version(python: str) -> str:
    return subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                          check=True, capture_output=True, text=True).stdout.strip()


def _make_laif_venv(root: Path, python: str, packages: dict) -> str:
    """/opt/venv as in the LUMI AI Factory images: a venv of the image's Python without its system site packages,
    holding pip (the host interpreter's) and `packages` ({name: version}); returns its site-packages path."""
    version = _python_version(python)
    short = ".".join(version.split(".")[:2])
    venv = root / "opt/venv"
    site = venv / "lib" / ("python" + short) / "site-packages"
    site.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = %s\ninclude-system-site-packages = false\nversion = %s\n"
                                     % (os.path.dirname(python), version))
    (venv / "bin").mkdir()
    (venv / "bin/python").symlink_to(python)
    for alias in ("python3", "python" + short):
        (venv / "bin" / alias).symlink_to("python")
    (venv / "bin/pip").write_text('#!/bin/sh\nexec /opt/venv/bin/python -m pip "$@"\n')
    (venv / "bin/pip").chmod(0o755)
    host_site = subprocess.run([python, "-c", "import os, pip; print(os.path.dirname(pip.__path__[0]))"],
                               check=True, capture_output=True, text=True).stdout.strip()
    for entry in Path(host_site).iterdir():
        if entry.name == "pip" or (entry.name.startswith("pip-") and entry.name.endswith(".dist-info")):
            shutil.copytree(entry, site / entry.name, symlinks=True)
    for name, pkg_version in packages.items():
        write_distribution(site, name, pkg_version)
    return "/" + str(site.relative_to(root))


def write_distribution(site: Path, name: str, version: str) -> None:
    """An installed pure-Python distribution: module `name` (dashes as underscores) with VERSION, and its
    dist-info."""
    module = name.replace("-", "_")
    (site / module).mkdir()
    (site / module / "__init__.py").write_text("VERSION = %r\n" % version)
    info = site / ("%s-%s.dist-info" % (module, version))
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


def make_test_rootfs(root: Path, python: str, *, conda: bool = False, laif: dict | None = None,
                     laif_pythonpath: tuple = (), sbom_pip: dict | None = None, env: dict | None = None) -> Path:
    """Create a tiny image tree in `root`.

    `python` is the absolute path of a real base (non-venv) interpreter on the
    host.  By default the tree mimics post-2025 images (Python on PATH under
    /opt/container/bin); conda=True mimics pre-2025 ones (a `pytorch` env that
    must be activated via $WITH_CONDA); laif={name: version} mimics the LUMI AI
    Factory images (a venv at /opt/venv holding those packages, on PATH and on
    PYTHONPATH, a runscript that sets a variable and ends in exec "$@", and a
    /.sbom.json listing them, or sbom_pip; laif_pythonpath adds entries to its
    PYTHONPATH).  `env` adds exports to the env script.
    """
    root = Path(root)
    sd = root / ".singularity.d"
    (sd / "env").mkdir(parents=True)
    lines = ["#!/bin/sh", "# Generated test image environment"]
    if laif is not None:
        site = _make_laif_venv(root, python, laif)
        lines.append('export PATH="/opt/venv/bin:$PATH"')
        lines.append('export PYTHONPATH="%s:$PYTHONPATH"' % ':'.join((site,) + tuple(laif_pythonpath)))
        (sd / "runscript").write_text(LAIF_RUNSCRIPT)
        (sd / "runscript").chmod(0o755)
        short = ".".join(_python_version(python).split(".")[:2])
        sbom = {"apt": [{"name": "python" + short, "version": _python_version(python) + "-1"},
                        {"name": "rocm-core", "version": "6.4.4.60404-129~24.04"}],
                "pip": [{"name": name, "version": version}
                        for name, version in sorted((laif if sbom_pip is None else sbom_pip).items())]}
        (root / ".sbom.json").write_text(json.dumps(sbom) + "\n")
    elif conda:
        base = root / "opt/miniconda3"
        _link_pythons(base / "envs/pytorch/bin", python)
        (base / "bin").mkdir(parents=True)
        (base / "bin/activate").write_text(_ACTIVATE)
        lines.append("export WITH_CONDA='source /opt/miniconda3/bin/activate pytorch'")
    else:
        bindir = root / "opt/container/bin"
        _link_pythons(bindir, python)
        pip = bindir / "pip"
        pip.write_text('#!/bin/sh\nexec /opt/container/bin/python -m pip "$@"\n')
        pip.chmod(0o755)
        lines.append('export PATH="/opt/container/bin:$PATH"')
    for key, value in (env or {}).items():
        lines.append(f"export {key}={shlex.quote(str(value))}")
    (sd / "env/90-environment.sh").write_text("\n".join(lines) + "\n")
    (sd / "env/90-environment.sh").chmod(0o755)
    labels = {"org.label-schema.schema-version": "1.0", "test.image.conda": str(conda)}
    (sd / "labels.json").write_text(json.dumps(labels, indent=2) + "\n")
    return root


def make_test_sif(dest: Path, python: str, *, trees: dict | None = None, **kw) -> Path:
    """make_test_rootfs() in a temp dir + build_sif() to `dest`.

    `trees` maps absolute paths in the image to host directories copied there
    (e.g. distributions' metadata, found through PYTHONPATH in `env`).
    """
    dest = Path(dest)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        root = make_test_rootfs(Path(tmp) / "rootfs", python, **kw)
        for target, source in (trees or {}).items():
            shutil.copytree(source, root / target.lstrip("/"), symlinks=True)
        return build_sif(root, dest)


def sif_partition_offset(path) -> int:
    """Byte offset of the first SquashFS system partition of a SIF v1 file."""
    with open(path, "rb") as f:
        hdr = f.read(128)
        if len(hdr) < 128 or hdr[32:41] != b"SIF_MAGIC":
            raise ValueError(f"{path}: not a SIF image")
        total, doff, dsize = struct.unpack_from("<qqq", hdr, 0x58)
        f.seek(doff)
        descs = f.read(dsize)
    step = dsize // total if total else 0
    for i in range(total):
        # int32 datatype, bool used, 3x uint32 ids, int64 offset; extra at +201
        dtype, used, _, _, _, off = struct.unpack_from("<iBIIIq", descs, i * step)
        fstype, parttype = struct.unpack_from("<ii", descs, i * step + 201)
        if used and dtype == 0x4004 and fstype == 1 and parttype in (1, 2):
            return off
    raise ValueError(f"{path}: no SquashFS system partition")
