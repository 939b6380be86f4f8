"""LUMI's site defaults for its families (amd, laif): what LUMI's easyconfigs state because the site needs it, not
because the easyblock does (its defaults name no site)."""

# LUMI's file systems and the host's Slingshot library, bound into LUMI's AMD images
BINDS = ['/var/spool/slurmd', '/opt/cray', '/usr/lib64/libcxi.so.1', '/pfs', '/scratch', '/projappl', '/project',
         '/flash', '/appl']
# What LUMI's singularity-AI-bindings module binds, for the LUMI AI Factory images: those and libjansson
AI_BINDS = BINDS[:3] + ['/usr/lib64/libjansson.so.4'] + BINDS[3:]
# LUMI's modules whose binds would collide with the module's own
CONFLICTS = ['singularity-AI-bindings', 'lumi-aif-singularity-bindings']


def binds(name, values):
    return list(BINDS)


def ai_binds(name, values):
    return list(AI_BINDS)


def conflicts(name, values):
    return list(CONFLICTS)
