#!/bin/bash
# Instructions (valgrind's callgrind, whole process) of the client import, with and without
# cached bytecode: `import mcpsync, mcpsync.client, mcpsync.transport.stdio,
# mcpsync.transport.http` in a fresh interpreter. Load does not move these counts (wall-clock
# import times move by several per cent between runs), so two trees are compared here first.
#
# usage: benchmarks/import_instructions.sh TREE [TREE ...]
#   TREE: a directory holding a copy of the mcpsync package, e.g. made by
#         git archive COMMIT mcpsync | (mkdir -p /tmp/base && tar -x -C /tmp/base)
#   PY:   the interpreter (default python3); a plain CPython rather than a venv's, so that
#         no site-packages start-up differs between runs.
# The bytecode is cached under a private prefix (-X pycache_prefix), never in the tree, and
# PYTHONHASHSEED is fixed: string hashes decide dict layouts and so some instructions.
set -e
PY=${PY:-python3}
CODE='import mcpsync, mcpsync.client, mcpsync.transport.stdio, mcpsync.transport.http'
export PYTHONHASHSEED=0
unset PYTHONDONTWRITEBYTECODE
count() {
    valgrind --tool=callgrind --callgrind-out-file="$W/cg.out" "$@" 2>&1 |
        grep -o 'Collected : [0-9]*' | awk '{print $3}'
}
for tree in "$@"; do
    TREE=$(readlink -f "$tree")
    W=$(mktemp -d "${TMPDIR:-/tmp}/mcpsync-import-cg.XXXXXX")
    PFX=$W/pfx
    mkdir -p "$PFX" "$W/empty"
    cd "$W/empty"
    PYTHONPATH=$TREE "$PY" -X pycache_prefix="$PFX" -c "$CODE"      # writes the cache
    c=$(PYTHONPATH=$TREE count "$PY" -X pycache_prefix="$PFX" -c "$CODE")
    rm -rf "$PFX$TREE"                                                # this tree's cache only
    u=$(PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$TREE count "$PY" -X pycache_prefix="$PFX" -c "$CODE")
    printf '%s cached %.2f M uncached %.2f M\n' "$tree" "$(echo "$c/1000000" | bc -l)" \
        "$(echo "$u/1000000" | bc -l)"
    cd - > /dev/null
    rm -rf "$W"
done
