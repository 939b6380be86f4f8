# make demo: the main job, on a fresh Debian 12 machine (as root).  make test: the whole test suite.
# Everything needed is installed here, idempotently: Debian packages, EasyBuild 5.x and 4.9.4, a test venv.
TOOLS ?= /opt/lumi-container-tools
PY := $(TOOLS)/venv/bin/python
APT_PACKAGES := lmod squashfs-tools squashfuse proot siftool shellcheck python3 python3-venv python3-pip
PYTHON ?= python3

.PHONY: setup test demo generate check-easyconfigs clean-tools

setup: $(TOOLS)/apt.stamp $(TOOLS)/eb5/bin/eb $(TOOLS)/eb49/bin/eb $(TOOLS)/venv/setup.stamp

$(TOOLS)/apt.stamp:
	dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null)
	mkdir -p $(TOOLS) && touch $@

$(TOOLS)/eb5/bin/eb:
	$(PYTHON) -m venv $(TOOLS)/eb5
	$(TOOLS)/eb5/bin/pip install -q 'easybuild-framework>=5,<6' 'easybuild-easyblocks>=5,<6' pycodestyle

$(TOOLS)/eb49/bin/eb:
	$(PYTHON) -m venv $(TOOLS)/eb49
	$(TOOLS)/eb49/bin/pip install -q easybuild-framework==4.9.4 easybuild-easyblocks==4.9.4 pycodestyle

$(TOOLS)/venv/setup.stamp: setup.cfg setup.py
	$(PYTHON) -m venv $(TOOLS)/venv
	$(TOOLS)/venv/bin/pip install -q pytest jinja2 pyyaml pycodestyle setuptools wheel
	$(TOOLS)/venv/bin/pip install -q .
	touch $@

test: setup
	$(PY) -m pip install -q --no-deps --force-reinstall . >/dev/null
	LUMI_CT_TOOLS=$(TOOLS) $(PY) -m pytest -ra tests

demo: setup
	LUMI_CT_TOOLS=$(TOOLS) $(PY) demo/demo.py

# Maintainers: regenerate the easyconfigs from their spec, or check that they are in sync.
generate: setup
	cd easyconfigs/p/PyTorch && $(TOOLS)/venv/bin/generate-ec -o . PyTorch.yaml

check-easyconfigs: setup
	cd easyconfigs/p/PyTorch && $(TOOLS)/venv/bin/generate-ec --check -o . PyTorch.yaml

clean-tools:
	rm -rf $(TOOLS)
