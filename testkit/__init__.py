"""The test kit: the real parts that the tests (tests/), make demo (demo/) and make bench (benchmarks/) build on.

    testkit.easyblock the easyblock file the installs use
    testkit.images    real SIF test images: a minimal Debian 12 with a layer per kind of image; the small LAIF-like
                      images that generate-ec reads
    testkit.install   EasyBuild installs with this project's easyblock, Lmod shells, the container runtime in use,
                      the demo and LAIF-like test installations, wheels and fake commands
    testkit.slurm     a real Slurm cluster of two nodes, each in its own network namespaces
    testkit.specs     the specs of generate-ec's tests, and the SBOM of the LAIF image they describe
    testkit.users     the test users (a project's owner and member, an outsider) and running commands as them

No pytest here: what the tests add (skip or fail when a tool is missing, the runtime's features as marks) is in
tests/. Installed with the easyblock and generate-ec (setup.cfg), so that it is imported as `testkit`.
"""
