"""The files beside this package's modules (scripts/, programs/ and module/), each read as the text it is. In the
easyblock the build puts each text in its place as a string literal (tools/build-easyblock.py), so that the deployed
file is one file."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def source(path):
    """The text of the file at path under this package's directory, exactly (no newline translation)."""
    with open(os.path.join(HERE, path), newline='') as handle:
        return handle.read()
