# make demo: the main job, on a fresh Debian 12 machine (as root).  make test: the whole test suite.
# Everything needed is installed here, idempotently: Debian packages, EasyBuild 5.x and 4.9.4, a test venv,
# and torch for the test image of the distributed tests (a CPU build pip takes from local disk).
TOOLS ?= /opt/lumi-container-tools
PY := $(TOOLS)/venv/bin/python
APT_PACKAGES := lmod lua5.3 tcl8.6 squashfs-tools siftool shellcheck python3 python3-venv python3-pip slurm-wlm munge mmdebstrap \
		patchelf squashfuse fuse2fs gocryptfs iproute2 util-linux mpich openmpi-bin inotify-tools e2fsprogs acl
PYTHON ?= python3
# The Python of the users' EasyBuild: Debian's, which every user can run (root's python3 may live under /root)
SYSTEM_PYTHON := /usr/bin/python3
TORCH_VERSION := 2.13.0
# Wheels fetched once: ipykernel and what it needs (tests/test_jupyter_kernel.py), and the real wheels of the SquashFS
# options benchmark (make bench only)
KERNEL_WHEELS := $(TOOLS)/kernel-wheels
BENCH_WHEELS := $(TOOLS)/bench-wheels

.PHONY: setup users test check demo bench generate check-easyconfigs clean-tools lumi-user-repo easyblock docs

ROOTFS := $(TOOLS)/rootfs/bookworm
APPTAINER := $(TOOLS)/apptainer/bin/apptainer
# The setuid runtime, as LUMI's: its prefix is compiled in (tools/install-apptainer-suid.sh)
APPTAINER_SUID := $(TOOLS)/apptainer-suid
# (made again only when its script changes: a fresh clone's new file times must not cost a 15-minute build)
APPTAINER_SUID_STAMP := $(APPTAINER_SUID)/setup-$(shell cat tools/install-apptainer-suid.sh tools/sid-apt.sh | sha256sum | \
	cut -c1-16).stamp

EB5 := $(TOOLS)/eb5/compiled-opt1.stamp
EB49 := $(TOOLS)/eb49/compiled-opt1.stamp
STDLIB_BYTECODE := $(TOOLS)/stdlib-opt1-bytecode.stamp
setup: $(TOOLS)/apt.stamp $(EB5) $(EB49) $(STDLIB_BYTECODE) $(TOOLS)/venv/setup.stamp \
	$(TOOLS)/torch-$(TORCH_VERSION)/setup.stamp $(KERNEL_WHEELS)/fetched.stamp $(APPTAINER) \
	$(ROOTFS)/apptainer-layout.stamp users

# The tests' users (an owner and a member of a project group, an outsider; useradd and groupadd in
# tools/setup-users.sh) and /dev/fuse open to them: checked on every run, as a device's mode does not survive a reboot
users: | $(TOOLS)/apt.stamp
	tools/setup-users.sh

$(TOOLS)/apt.stamp: Makefile
	dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null)
	mkdir -p $(TOOLS) && touch $@

# EasyBuild runs as the tests' users: its venvs are made with Debian's Python, and compiled (EasyBuild's sources
# come without bytecode, and the test users cannot write it: every eb would compile its 270 modules again). Both
# optimisation levels: the eb script runs Python with PYTHONOPTIMIZE=1, which reads .opt-1.pyc files only.
$(EB5): | $(TOOLS)/apt.stamp
	rm -rf $(TOOLS)/eb5 && $(SYSTEM_PYTHON) -m venv $(TOOLS)/eb5
	$(TOOLS)/eb5/bin/pip install -q 'easybuild-framework>=5,<6' 'easybuild-easyblocks>=5,<6' pycodestyle
	$(TOOLS)/eb5/bin/python -m compileall -q -o 0 -o 1 $(TOOLS)/eb5/lib >/dev/null
	touch $@

$(EB49): | $(TOOLS)/apt.stamp
	rm -rf $(TOOLS)/eb49 && $(SYSTEM_PYTHON) -m venv $(TOOLS)/eb49
	$(TOOLS)/eb49/bin/pip install -q easybuild-framework==4.9.4 easybuild-easyblocks==4.9.4 pycodestyle
	$(TOOLS)/eb49/bin/python -m compileall -q -o 0 -o 1 $(TOOLS)/eb49/lib >/dev/null
	touch $@

# The same for Debian's standard library, whose package holds the plain .pyc files only: without .opt-1.pyc files
# every eb compiled the standard library modules it imports again ('eb --version' as a test user: 1.4 s of CPU time
# with neither these nor EasyBuild's, 0.35 s with both). Bytecode is a cache that Python checks against its source.
$(STDLIB_BYTECODE): | $(TOOLS)/apt.stamp
	$(SYSTEM_PYTHON) -m compileall -q -o 1 -x '/(test|tests|idle_test)/' \
	  "$$($(SYSTEM_PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')" >/dev/null
	touch $@

# The tests' venv, with Debian's Python too: the test users run generate-ec and the test kit's helpers. flake8 with
# flake8-comprehensions: the easyblock passes easybuild-easyblocks' lint (tests/test_upstream.py). jupyter_client: the
# Jupyter client that starts the module's kernel (tests/test_jupyter_kernel.py). EasyBuild 5: the unit tests of the
# easyblock's class import it (generate-ec and the test kit need no EasyBuild).
$(TOOLS)/venv/setup.stamp: setup.cfg setup.py Makefile | $(TOOLS)/apt.stamp
	[ "$$(readlink -f $(TOOLS)/venv/bin/python)" = "$$(readlink -f $(SYSTEM_PYTHON))" ] || rm -rf $(TOOLS)/venv
	$(SYSTEM_PYTHON) -m venv $(TOOLS)/venv
	$(TOOLS)/venv/bin/pip install -q pytest jinja2 pyyaml pycodestyle pyflakes flake8 flake8-comprehensions setuptools \
	  wheel jupyter_client 'easybuild-framework>=5,<6'
	$(TOOLS)/venv/bin/pip install -q .
	touch $@

# Installed with --target: the distributed tests bind this tree into a test image, whose PYTHONPATH points to it.
$(TOOLS)/torch-$(TORCH_VERSION)/setup.stamp: | $(TOOLS)/apt.stamp
	rm -rf $(TOOLS)/torch-$(TORCH_VERSION)
	$(PYTHON) -m pip install -q --disable-pip-version-check --target $(TOOLS)/torch-$(TORCH_VERSION) \
	  torch==$(TORCH_VERSION) 2>&1 | grep -v -e '^WARNING: Location' -e 'as the .root. user' || true
	test -d $(TOOLS)/torch-$(TORCH_VERSION)/torch
	touch $@

# ipykernel and what it needs, as wheels for the test images' Python (Debian 12's CPython 3.11): installed into a test
# module's venv from this directory, as a user would with venv-pip (tests/test_jupyter_kernel.py); fetched once
$(KERNEL_WHEELS)/fetched.stamp: | $(TOOLS)/apt.stamp
	rm -rf $(KERNEL_WHEELS)
	$(SYSTEM_PYTHON) -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version 3.11 \
	  --implementation cp --abi cp311 $(foreach tag,manylinux2014_x86_64 manylinux_2_28_x86_64 any,--platform $(tag)) \
	  -d $(KERNEL_WHEELS) ipykernel==7.4.0
	touch $@

# The container runtime of the tests and the demo: Apptainer (1.4.5) from Debian's unstable suite, relocated into
# $(TOOLS)/apptainer with a glibc of its own (about 10 s); $(TOOLS)/apptainer/bin/singularity is a link to it.
$(APPTAINER): tools/install-apptainer.sh tools/sid-apt.sh | $(TOOLS)/apt.stamp
	tools/install-apptainer.sh $(TOOLS)/apptainer

# The runtime as LUMI runs it: Apptainer 1.4.5 built with setuid from Debian's source package (a sid build root,
# then Go: about 15 minutes on 2 cores, once). As any user but root it mounts the SIF, SquashFS overlays and image-src
# binds with loop devices and the kernel, and refuses a writable directory overlay, as LUMI's SingularityCE does.
$(APPTAINER_SUID_STAMP): | $(TOOLS)/apt.stamp
	tools/install-apptainer-suid.sh $(APPTAINER_SUID)
	touch $@

# The test images' operating system: a minimal Debian 12 from Debian's packages, with the /.singularity.d layout
# (environment and action scripts, runscript, labels) that apptainer build gives it; built once (about 30 s).
$(ROOTFS)/apptainer-layout.stamp: | $(TOOLS)/apt.stamp $(APPTAINER)
	rm -rf $(ROOTFS) $(ROOTFS).tmp $(ROOTFS).debian && mkdir -p $(dir $(ROOTFS))
	mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,python3-pip,python-is-python3,procps \
	  $(foreach dir,doc man locale info,--dpkgopt='path-exclude=/usr/share/$(dir)/*') bookworm $(ROOTFS).debian
	$(APPTAINER) --quiet build --sandbox $(ROOTFS).tmp $(ROOTFS).debian
	rm -rf $(ROOTFS).debian && mv $(ROOTFS).tmp $(ROOTFS) && touch $@

# The suite drives Apptainer, installed above, as 'singularity' (LUMI's name for its runtime) and, where a test says
# so, as 'apptainer'. With SINGULARITY=/path/to/singularity (or apptainer) it drives that runtime instead, alone: on
# LUMI, SingularityCE 4.x.
# The tests, the demo and the benchmarks import the easyblock, generate-ec and the test kit (testkit/) as installed:
# this checkout's, reinstalled before each run (without setuptools' build/, which would keep a module removed since,
# e.g. an image family that generate-ec would still find)
INSTALL_THIS := rm -rf build && $(PY) -m pip install -q --no-deps --force-reinstall . >/dev/null
# The suite (tools/run-tests.sh): the tests that start a container with the user-namespace Apptainer, and at the same
# time, on the other core, again with the setuid one (LUMI's mode), as users of their own, with the rest.
RUN_TESTS = LUMI_CT_TOOLS=$(TOOLS) LUMI_CT_TORCH=$(TOOLS)/torch-$(TORCH_VERSION) LUMI_CT_KERNEL_WHEELS=$(KERNEL_WHEELS) \
	tools/run-tests.sh $(PY)
ifeq ($(SINGULARITY),)
test: setup $(APPTAINER_SUID_STAMP)
	$(INSTALL_THIS)
	$(RUN_TESTS) $(TOOLS)/apptainer/bin/singularity $(APPTAINER_SUID)/bin/singularity
else
# No root needed here: the Debian packages and the root file system must be there already.
test: $(EB5) $(EB49) $(TOOLS)/venv/setup.stamp
	$(INSTALL_THIS)
	$(RUN_TESTS) $(abspath $(SINGULARITY))
endif

# The unit tier, for the developer loop: the tests that start neither a container (not marked runtime, needing no
# feature of a runtime) nor EasyBuild (not marked eb), nor are of the system tier (tests/conftest.py's tier_of): about
# 1.5 minutes here, with the tools made
check: setup
	$(INSTALL_THIS)
	$(RUN_TESTS) $(TOOLS)/apptainer/bin/singularity -- --tier unit

demo: setup
	$(INSTALL_THIS)
	LUMI_CT_TOOLS=$(TOOLS) $(PY) demo/demo.py

# Benchmarks (not part of make test, which runs them once in a quick mode): a table, and JSON with
# make bench BENCH_ARGS="--json bench.json --markdown". With the setuid runtime too (its rows: LUMI's mode).
bench: setup $(APPTAINER_SUID_STAMP) $(BENCH_WHEELS)/fetched.stamp
	$(INSTALL_THIS)
	LUMI_CT_TOOLS=$(TOOLS) $(PY) benchmarks/run.py $(BENCH_ARGS)

# The real wheels (numpy, scipy, pandas, transformers, ... from PyPI, about 240 MB) of the SquashFS options
# benchmark, pinned in benchmarks/bench-wheels.txt: downloaded once, kept in the tools dir; make test never needs them
$(BENCH_WHEELS)/fetched.stamp: benchmarks/bench-wheels.txt benchmarks/real_venv.py | $(TOOLS)/apt.stamp
	$(SYSTEM_PYTHON) benchmarks/real_venv.py fetch $(BENCH_WHEELS)
	touch $@

# Maintainers: regenerate the easyconfigs from their specs, or check that they are in sync. Every spec under
# easyconfigs/ (easyconfigs/p/PyTorch/PyTorch.yaml, ...) is run in its own directory, where its easyconfigs are.
# They need generate-ec only: a venv of their own in the checkout (GENERATE_VENV), made by whoever runs them, without
# root or the test set-up.
SPECS = $(sort $(shell find easyconfigs -name '*.yaml'))
GENERATE_VENV ?= .venv-generate
GENERATE_EC = $(abspath $(GENERATE_VENV))/bin/generate-ec
# (made again when a source of generate-ec changes: pip installs a copy). generate-ec needs no EasyBuild, but a spec
# with easybuild: 5 (easyconfigs/p/PyTorch/PyTorch.yaml) takes EasyBuild 5's field names from it.
$(GENERATE_VENV)/setup.stamp: setup.cfg setup.py $(wildcard easyblocks/singularitycontainer_src/*.py generator/*.py \
		generator/*/*.py generator/templates/*.j2)
	rm -rf $(GENERATE_VENV) && $(PYTHON) -m venv $(GENERATE_VENV)
	$(GENERATE_VENV)/bin/python -m pip install -q . 'easybuild-framework>=5,<6'
	rm -rf build
	touch $@

generate: $(GENERATE_VENV)/setup.stamp
	for spec in $(SPECS); do \
	  (cd "$$(dirname "$$spec")" && $(GENERATE_EC) -o . "$$(basename "$$spec")") || exit; \
	done

check-easyconfigs: $(GENERATE_VENV)/setup.stamp
	for spec in $(SPECS); do \
	  (cd "$$(dirname "$$spec")" && $(GENERATE_EC) --check -o . "$$(basename "$$spec")") || exit; \
	done

# Maintainers: build the one-file easyblock from its sources, easyblocks/singularitycontainer_src/ (the modules and the
# bash, Python, Lua and Tcl files beside them), after changing one of them (tests/test_sources.py fails while the
# easyblock is stale). Python's standard library only.
easyblock:
	$(PYTHON) tools/build-easyblock.py

# Maintainers: write docs/reference.md (each command's help, the files of an install, the parameters) from the
# easyblock's tables, after changing one (tests/test_sources.py fails while it is stale)
docs:
	$(PYTHON) tools/write-reference.py

clean-tools:
	rm -rf $(TOOLS)

# On LUMI: put the easyblock and the easyconfigs where LUMI's EasyBuild-user module finds them, in your own
# EasyBuild repository ($EBU_USER_PREFIX, by default ~/EasyBuild), with your umask's modes, saying which easyconfigs
# of LUMI's the same names shadow (tools/lumi-user-repo.sh). Needs nothing but make, bash and coreutils.
EBU_USER_PREFIX ?= $(HOME)/EasyBuild
USER_REPO := $(EBU_USER_PREFIX)/UserRepo/easybuild
lumi-user-repo:
	@tools/lumi-user-repo.sh $(USER_REPO)
