"""The sources of the SingularityContainer easyblock, easyblocks/generic/singularitycontainer.py, which
tools/build-easyblock.py builds from them (make easyblock): the deployed easyblock stays one self-contained file.

Its modules, each importing what it uses from those above it: layout (names and constants), text (quoting and
templates), sif, requirements, install_lock, install_dir, module_plan, scripts (the scripts' templates from scripts/
and programs/ and their table), parameters (the easyconfig parameters) and easyblock (the class and its steps).
generate-ec and the test kit import them directly; only the module easyblock needs EasyBuild.
"""
