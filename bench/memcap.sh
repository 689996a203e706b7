#!/usr/bin/env bash
# Run a command with a memory limit, so that a tool which outgrows the machine is killed by the
# out-of-memory killer inside its own group rather than taking the machine (and its other
# users) down:   bench/memcap.sh BYTES command [args...]
# Uses a cgroup v1 memory group (/sys/fs/cgroup/memory/unroll-bench-<pid>, needs root; the
# limit counts the group's page cache too, which the kernel reclaims before it kills) or, on a
# cgroup v2 machine with systemd, `systemd-run --scope -p MemoryMax=BYTES`. Exit status: the
# command's (137 when it was killed). Writes "memcap: oom_kill N" to stderr when the group
# counted kills.
#
# The v1 group's limit counts page cache, and the kernel kills only when it can reclaim
# nothing: a tool that reads its input through the page cache while its own memory sits at
# the limit is not killed but crawls (each read evicts the page before), for many minutes. So
# a watchdog kills the group when its anonymous memory (memory.stat rss) stays within
# MEMCAP_SLACK bytes (default 512 MiB) of the limit for MEMCAP_GRACE seconds (default 20), and
# writes "memcap: killed at the cap" -- the out-of-memory kill the tool would get on a machine
# of that size with no other page cache to take.
set -euo pipefail
limit=$1
shift
v1=/sys/fs/cgroup/memory
if [ -w "$v1" ] && [ -f "$v1/cgroup.procs" ]; then
    cg=$v1/unroll-bench-$$
    mkdir "$cg"
    echo "$limit" > "$cg/memory.limit_in_bytes"
    # no swap beyond the limit where the kernel accounts it
    [ ! -w "$cg/memory.memsw.limit_in_bytes" ] || echo "$limit" > "$cg/memory.memsw.limit_in_bytes"
    slack=${MEMCAP_SLACK:-536870912}
    grace=${MEMCAP_GRACE:-20}
    (
        n=0
        while sleep 1; do
            rss=$(awk '$1 == "rss" { print $2 }' "$cg/memory.stat" 2> /dev/null) || break
            [ -n "$rss" ] || break
            if [ "$rss" -ge $((limit - slack)) ]; then n=$((n + 1)); else n=0; fi
            if [ "$n" -ge "$grace" ]; then
                echo "memcap: killed at the cap (anonymous memory $rss bytes for ${grace} s)" >&2
                xargs -r kill -9 < "$cg/cgroup.procs" 2> /dev/null || true
                break
            fi
        done
    ) &
    watchdog=$!
    rc=0
    (echo "$BASHPID" > "$cg/cgroup.procs" && exec "$@") || rc=$?
    kill "$watchdog" 2> /dev/null || true
    wait "$watchdog" 2> /dev/null || true
    kills=$(awk '$1 == "oom_kill" { print $2 }' "$cg/memory.oom_control" 2>/dev/null || true)
    [ -z "$kills" ] || [ "$kills" = 0 ] || echo "memcap: oom_kill $kills" >&2
    rmdir "$cg" 2>/dev/null || true
    exit "$rc"
elif command -v systemd-run > /dev/null && systemd-run --scope --quiet -p MemoryMax=1G true \
    2> /dev/null; then
    exec systemd-run --scope --quiet -p MemoryMax="$limit" "$@"
else
    echo "memcap: no cgroup v1 memory controller to write and no systemd-run" >&2
    exit 2
fi
