"""The container image's Python packages, seen from the virtual environment that holds this file.

Written by EasyBuild's SingularityContainer easyblock. Python imports it at start-up
(singularitycontainer_image_packages.pth). It puts the image's package directories (found when the module was
installed) after this environment's own site-packages, so that every package of the image can be imported and pip
counts it as installed, while a package installed here wins over the image's copy, also over one on the image's
PYTHONPATH. The install appends those directories (IMAGE_PACKAGE_DIRS) and the call of main() to this file.
"""
import os
import sys


def arrange(path, own, image_dirs):
    """path with own moved before the first of image_dirs, and the missing image_dirs added after it."""
    path = [entry for entry in path if os.path.normpath(entry or '.') != own]
    normalised = [os.path.normpath(entry) if entry else entry for entry in path]
    first_image = min([normalised.index(d) for d in image_dirs if d in normalised] or [len(path)])
    missing = [d for d in image_dirs if d not in normalised]
    return path[:first_image] + [own] + path[first_image:] + missing


def main(image_dirs):
    """sys.path with this environment's site-packages (where this file is) before the image's directories."""
    sys.path[:] = arrange(sys.path, os.path.dirname(os.path.abspath(__file__)), image_dirs)
