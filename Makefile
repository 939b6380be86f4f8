# make demo: the main job, on a fresh Debian 12 machine (as root).  make test: the whole test suite.
# Everything needed is installed here, idempotently: Debian packages, EasyBuild 5.x and 4.9.4, a test venv,
# and torch for the test image of the distributed tests (a CPU build pip takes from local disk).
TOOLS ?= /opt/lumi-container-tools
PY := $(TOOLS)/venv/bin/python
APT_PACKAGES := lmod lua5.3 tcl8.6 squashfs-tools siftool shellcheck python3 python3-venv python3-pip slurm-wlm munge mmdebstrap \
		golang-go build-essential libssl-dev uuid-dev libgpgme-dev libseccomp-dev pkg-config cryptsetup-bin
PYTHON ?= python3
TORCH_VERSION := 2.13.0

.PHONY: setup test demo bench generate check-easyconfigs clean-tools lumi-user-repo

ROOTFS := $(TOOLS)/rootfs/bookworm
SINGULARITY_342 := $(TOOLS)/singularity-3.4.2

setup: $(TOOLS)/apt.stamp $(TOOLS)/eb5/bin/eb $(TOOLS)/eb49/bin/eb $(TOOLS)/venv/setup.stamp \
	$(TOOLS)/torch-$(TORCH_VERSION)/setup.stamp $(ROOTFS)/setup.stamp

$(TOOLS)/apt.stamp: Makefile
	dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null)
	mkdir -p $(TOOLS) && touch $@

$(TOOLS)/eb5/bin/eb: | $(TOOLS)/apt.stamp
	$(PYTHON) -m venv $(TOOLS)/eb5
	$(TOOLS)/eb5/bin/pip install -q 'easybuild-framework>=5,<6' 'easybuild-easyblocks>=5,<6' pycodestyle

$(TOOLS)/eb49/bin/eb: | $(TOOLS)/apt.stamp
	$(PYTHON) -m venv $(TOOLS)/eb49
	$(TOOLS)/eb49/bin/pip install -q easybuild-framework==4.9.4 easybuild-easyblocks==4.9.4 pycodestyle

$(TOOLS)/venv/setup.stamp: setup.cfg setup.py | $(TOOLS)/apt.stamp
	$(PYTHON) -m venv $(TOOLS)/venv
	$(TOOLS)/venv/bin/pip install -q pytest jinja2 pyyaml pycodestyle pyflakes setuptools wheel
	$(TOOLS)/venv/bin/pip install -q .
	touch $@

# Installed with --target: the distributed tests bind this tree into a test image, whose PYTHONPATH points to it.
$(TOOLS)/torch-$(TORCH_VERSION)/setup.stamp: | $(TOOLS)/apt.stamp
	rm -rf $(TOOLS)/torch-$(TORCH_VERSION)
	$(PYTHON) -m pip install -q --disable-pip-version-check --target $(TOOLS)/torch-$(TORCH_VERSION) \
	  torch==$(TORCH_VERSION) 2>&1 | grep -v -e '^WARNING: Location' -e 'as the .root. user' || true
	test -d $(TOOLS)/torch-$(TORCH_VERSION)/torch
	touch $@

# The test images' operating system: a minimal Debian 12 from Debian's packages, built once (about 30 s).
$(ROOTFS)/setup.stamp: | $(TOOLS)/apt.stamp
	rm -rf $(ROOTFS) $(ROOTFS).tmp && mkdir -p $(dir $(ROOTFS))
	mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,python3-pip,python-is-python3,procps \
	  $(foreach dir,doc man locale info,--dpkgopt='path-exclude=/usr/share/$(dir)/*') bookworm $(ROOTFS).tmp
	mv $(ROOTFS).tmp $(ROOTFS) && touch $@

# A real Singularity: 3.4.2, the newest whose source carries its Go dependencies, so that it builds offline
# (SINGULARITY_SOURCE: its vendored source tree and patch, see shared/runtime/README.md). As root: the starter is
# setuid. make -j1: its Makefile races with -j2.
SINGULARITY_SOURCE ?= $(firstword $(wildcard ../shared/runtime /work/shared/runtime))
$(SINGULARITY_342)/bin/singularity: | $(TOOLS)/apt.stamp
	@test -n "$(SINGULARITY_SOURCE)" || { echo "No Singularity source: set SINGULARITY_SOURCE to the directory of" \
	  "singularity-3.4.2-vendored.tar.xz and squashfs-errors.patch" >&2; exit 1; }
	rm -rf $(TOOLS)/build-singularity && mkdir -p $(TOOLS)/build-singularity
	cd $(TOOLS)/build-singularity && tar xJf $(abspath $(SINGULARITY_SOURCE))/singularity-3.4.2-vendored.tar.xz && \
	  cd singularity-3.4.2 && patch -s -p1 < $(abspath $(SINGULARITY_SOURCE))/squashfs-errors.patch && \
	  echo 3.4.2 > VERSION && export GOFLAGS=-mod=vendor GOPROXY=off GOPATH=$$PWD/../gopath \
	  GOCACHE=$$PWD/../gocache && ./mconfig -s --prefix=$(SINGULARITY_342) >/dev/null && \
	  make -s -C builddir -j1 >/dev/null && make -s -C builddir install >/dev/null
	# root here lacks CAP_SYS_RESOURCE, and 3.4.2 asks for every capability by default
	sed -i 's/^root default capabilities = full/root default capabilities = no/' \
	  $(SINGULARITY_342)/etc/singularity/singularity.conf
	rm -rf $(TOOLS)/build-singularity

# The suite drives the container runtime with the stand-in, and then the tests marked 'runtime' once more with the
# real Singularity 3.4.2 built here (tests that need what 3.4.2 lacks are left out, and listed; so are their
# EasyBuild 4.9 variants, which give the runtime the same commands as the EasyBuild 5 ones). With
# SINGULARITY=/path/to/singularity (or apptainer) it runs them all with that runtime instead, once, as on LUMI.
TEST := LUMI_CT_TOOLS=$(TOOLS) LUMI_CT_TORCH=$(TOOLS)/torch-$(TORCH_VERSION) $(PY) -m pytest -ra -p no:cacheprovider
# The tests import the easyblock and generate-ec as installed: this checkout's, reinstalled before each run
INSTALL_THIS := $(PY) -m pip install -q --no-deps --force-reinstall . >/dev/null
ifeq ($(SINGULARITY),)
test: setup $(SINGULARITY_342)/bin/singularity
	$(INSTALL_THIS)
	$(TEST) tests
	LUMI_CT_SINGULARITY=$(SINGULARITY_342)/bin/singularity $(TEST) -m runtime -k 'not 4.9' tests
else
# No root needed here: the Debian packages and the root file system must be there already.
test: $(TOOLS)/eb5/bin/eb $(TOOLS)/eb49/bin/eb $(TOOLS)/venv/setup.stamp
	$(INSTALL_THIS)
	LUMI_CT_SINGULARITY=$(abspath $(SINGULARITY)) $(TEST) tests
endif

demo: setup
	LUMI_CT_TOOLS=$(TOOLS) $(PY) demo/demo.py

# Benchmarks (not part of make test, which runs them once in a quick mode): a table, and JSON with
# make bench BENCH_ARGS="--json bench.json --markdown".
bench: setup
	LUMI_CT_TOOLS=$(TOOLS) $(PY) benchmarks/run.py $(BENCH_ARGS)

# Maintainers: regenerate the easyconfigs from their spec, or check that they are in sync.
generate: setup
	cd easyconfigs/p/PyTorch && $(TOOLS)/venv/bin/generate-ec -o . PyTorch.yaml

check-easyconfigs: setup
	cd easyconfigs/p/PyTorch && $(TOOLS)/venv/bin/generate-ec --check -o . PyTorch.yaml

clean-tools:
	rm -rf $(TOOLS)

# On LUMI: put the easyblock and the easyconfigs where LUMI's EasyBuild-user module finds them, in your own
# EasyBuild repository ($EBU_USER_PREFIX, by default ~/EasyBuild). Needs nothing but make and install.
EBU_USER_PREFIX ?= $(HOME)/EasyBuild
USER_REPO := $(EBU_USER_PREFIX)/UserRepo/easybuild
lumi-user-repo:
	install -D -m 644 easyblocks/generic/singularitycontainer.py $(USER_REPO)/easyblocks/generic/singularitycontainer.py
	install -d $(USER_REPO)/easyconfigs/p/PyTorch
	install -m 644 easyconfigs/p/PyTorch/*.eb $(USER_REPO)/easyconfigs/p/PyTorch/
	@echo "Installed into $(USER_REPO): module load LUMI partition/container EasyBuild-user, then eb <easyconfig>"
