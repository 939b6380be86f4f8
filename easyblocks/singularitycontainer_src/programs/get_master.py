#!/usr/bin/env python3
"""get-master: print the first host of a Slurm host list, the master of a torch.distributed job.

Usage: get-master [HOSTLIST]   (default: $SLURM_JOB_NODELIST, else $SLURM_NODELIST)
Written by EasyBuild's SingularityContainer easyblock; scontrol is not available in the container,
so the host list syntax is parsed here: nid[005000-005003,005007], rack[1-2]-node[01-04], nid[005000]-ib.
"""
import os
import re
import sys

HOST_CHARACTERS = re.compile(r'[A-Za-z0-9._-]*')


def first_of_range(ranges):
    """The first number of a bracket's ranges such as '005000-005003,005007'."""
    first = ranges.split(',')[0]
    low, dash, high = first.partition('-')
    if not re.fullmatch(r'[0-9]+', low) or (dash and not re.fullmatch(r'[0-9]+', high)):
        raise ValueError("'%s' is not a number range" % ranges)
    if dash and int(high) < int(low):
        raise ValueError("the range '%s' runs backwards" % first)
    return low


def first_host(hostlist):
    """The first host name of a Slurm host list expression."""
    depth = 0
    for pos, char in enumerate(hostlist):
        depth += {'[': 1, ']': -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError("unbalanced brackets")
        if char == ',' and depth == 0:
            hostlist = hostlist[:pos]
            break
    if depth != 0:
        raise ValueError("unbalanced brackets")
    host = re.sub(r'\[([^\]]*)\]', lambda match: first_of_range(match.group(1)), hostlist)
    if not host or not HOST_CHARACTERS.fullmatch(host):
        raise ValueError("no host name")
    return host


def main(argv):
    hostlist = argv[1] if len(argv) > 1 else os.environ.get('SLURM_JOB_NODELIST') or os.environ.get('SLURM_NODELIST')
    if not hostlist:
        sys.stderr.write("get-master: error: no host list: pass one as argument or run in a Slurm job "
                         "(SLURM_JOB_NODELIST and SLURM_NODELIST are not set)\n")
        return 1
    try:
        print(first_host(hostlist))
    except ValueError as err:
        sys.stderr.write("get-master: error: cannot parse host list %r: %s\n" % (hostlist, err))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
