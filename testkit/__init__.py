"""The test kit: the real parts that the tests (tests/), make demo (demo/) and make bench (benchmarks/) build on.

    testkit.images    real SIF test images: a minimal Debian 12 with a layer per kind of image
    testkit.install   EasyBuild installs with this project's easyblock, Lmod shells, the container runtime in use,
                      the demo and LAIF-like test installations, wheels and fake commands
    testkit.slurm     a real Slurm cluster of two nodes, each in its own network namespaces

No pytest here: what the tests add (skip or fail when a tool is missing, the runtime's features as marks) is in
tests/. Installed with the easyblock and generate-ec (setup.cfg), so that it is imported as `testkit`.
"""
