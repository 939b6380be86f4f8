#!/bin/bash
# The users of the tests, made once and checked each run (idempotent; needs root): LUMI users are never root.
#   lumi-owner     installs and uses the modules; a member of the project group
#   lumi-member    another member of the project group (a shared project install)
#   lumi-outsider  another user of the same nodes, in no group of theirs
#   lumi-partner   a user whose primary group is lumi-outsider's (a group with no member list that is still shared)
#   lumis-owner, lumis-member, lumis-outsider, lumis-partner (group lumis-project): the same for the run of the suite with the
#   setuid runtime, which make test runs beside the other one (testkit/users.py)
# Also what an unprivileged Apptainer needs on this machine: /dev/fuse open to users (0600 here, 0666 on most
# machines), for squashfuse_ll in the user namespace.
set -euo pipefail
for set in lumi lumis; do
    group=$set-project
    getent group "$group" >/dev/null || groupadd "$group"
    for user in "$set-owner" "$set-member" "$set-outsider"; do
        if ! id -u "$user" >/dev/null 2>&1; then
            if [ "$user" = "$set-outsider" ]; then groups=(); else groups=(-G "$group"); fi
            useradd --create-home --shell /bin/bash "${groups[@]}" "$user"
        fi
        home=$(getent passwd "$user" | cut -d: -f6)
        [ -d "$home" ] || { mkdir -p "$home" && chown "$user:" "$home"; }
        chmod 0700 "$home"
    done
    if ! id -u "$set-partner" >/dev/null 2>&1; then
        useradd --create-home --shell /bin/bash --gid "$set-outsider" "$set-partner"
    fi
    chmod 0700 "$(getent passwd "$set-partner" | cut -d: -f6)"
done
if [ -c /dev/fuse ] && [ "$(stat -c %a /dev/fuse)" != 666 ]; then
    chmod 0666 /dev/fuse
fi
