"""The SingularityContainer easyblock, imported as a module: generate-ec applies its parameter rules and reads
SIF files with its functions, so that the generator and the easyblock follow one definition of each."""
import importlib.util
import os

try:
    import singularitycontainer as easyblock  # installed beside the generator (setup.cfg)
except ImportError:  # a checkout that was not installed: the file itself
    _PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'easyblocks', 'generic',
                         'singularitycontainer.py')
    _SPEC = importlib.util.spec_from_file_location('singularitycontainer', _PATH)
    easyblock = importlib.util.module_from_spec(_SPEC)
    _SPEC.loader.exec_module(easyblock)

__all__ = ['easyblock']
