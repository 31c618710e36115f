#!/usr/bin/env bash
# Installs or builds everything the peers rows of `bench/table.py` need beyond the
# repository, and says what it found. Run it once from anywhere (it is a benchmark's setup:
# CI never runs it):
#
#   bench/peers/setup.sh [--wassette-src DIR] [--wassette-ref REF] [--no-wassette]
#
#   wrk, perf      Debian's `wrk` and `linux-perf`, through apt-get when missing
#   Python         target/mcp-venv with PyPI `mcp` (the official SDK; its MCPServer)
#   Node + TS SDK  Node >= 18 (target/node as `.ci/run` installs it, else `node` on PATH,
#                  else Debian's `nodejs`/`npm`) and npm `@modelcontextprotocol/sdk@1`
#                  under target/mcp-node
#   this host      target/release/connector-host (and loadgen's stdio-floor)
#   rmcp echo      target/peers/release/rmcp-echo (bench/peers/rmcp-echo, rmcp 3.11)
#   mcp-load       target/peers/release/mcp-load (bench/peers/mcp-load: drives wassette's
#                  HTTP+SSE transport, which wrk cannot)
#   echo component target/peers/wasm32-wasip2/release/wassette_echo.wasm (for wassette)
#   wassette       built from source OUTSIDE the repository, in $PEER_BUILDS (default: the
#                  repository's parent directory's `peer-builds`): the source is a git
#                  repository given with --wassette-src (a clone or a bare mirror), at
#                  --wassette-ref (default: its HEAD), or else a clone of
#                  https://github.com/microsoft/wassette (where GitHub is out of reach,
#                  give a mirror, e.g. --wassette-src /work/.mirror/microsoft+wassette/repo).
#                  The binary lands in
#                  $PEER_BUILDS/bin/wassette and its commit in $PEER_BUILDS/bin/wassette.source.
#                  When it cannot be built, the table reports wassette as not run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PEER_BUILDS=${PEER_BUILDS:-$(dirname "$ROOT")/peer-builds}
WASSETTE_SRC=""
WASSETTE_REF="HEAD"
WASSETTE=1
while [ $# -gt 0 ]; do
    case "$1" in
        --wassette-src) WASSETTE_SRC=$2; shift 2 ;;
        --wassette-ref) WASSETTE_REF=$2; shift 2 ;;
        --no-wassette) WASSETTE=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "setup.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

say() { printf '\n[setup] %s\n' "$*" >&2; }
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
apt_install() {
    say "installing Debian packages: $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >&2
}

# ----- load generator and profiler ------------------------------------------------------
command -v wrk >/dev/null || apt_install wrk
command -v perf >/dev/null || apt_install linux-perf || say "linux-perf unavailable: profiles need valgrind instead"

# ----- the official Python SDK ------------------------------------------------------------
if ! target/mcp-venv/bin/python -c 'import mcp.server.mcpserver' 2>/dev/null; then
    say "Python venv target/mcp-venv with PyPI mcp"
    python3 -m venv target/mcp-venv
    target/mcp-venv/bin/pip install --quiet --upgrade 'mcp>=2.3'
fi

# ----- Node and the official TypeScript SDK 1.x -----------------------------------------
NODE=""
NPM=()
if [ -x target/node/bin/node ]; then
    NODE=$PWD/target/node/bin/node
    [ -f target/npm/bin/npm-cli.js ] && NPM=("$NODE" "$PWD/target/npm/bin/npm-cli.js")
fi
if [ -z "$NODE" ] && command -v node >/dev/null; then NODE=$(command -v node); fi
if [ -z "$NODE" ]; then
    apt_install nodejs npm
    NODE=$(command -v node)
fi
if [ ${#NPM[@]} -eq 0 ]; then
    command -v npm >/dev/null || apt_install npm
    NPM=(npm)
fi
if ! "$NODE" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)'; then
    echo "setup.sh: $NODE is Node $("$NODE" --version); the TypeScript SDK needs 18 or later" >&2
    exit 1
fi
if [ ! -f target/mcp-node/node_modules/@modelcontextprotocol/sdk/package.json ]; then
    say "npm @modelcontextprotocol/sdk@1 into target/mcp-node"
    mkdir -p target/mcp-node
    PATH="$(dirname "$NODE"):$PATH" "${NPM[@]}" install --prefix target/mcp-node --no-audit \
        --no-fund --loglevel=error '@modelcontextprotocol/sdk@1'
fi

# ----- this host and the Rust peers -------------------------------------------------------
say "this host (release)"
cargo build --release -p connector-host -p loadgen --bin connector-host --bin stdio-floor
say "rmcp echo server"
cargo build --release --locked --manifest-path bench/peers/rmcp-echo/Cargo.toml \
    --target-dir target/peers
say "mcp-load (drives the HTTP+SSE transport)"
cargo build --release --locked --manifest-path bench/peers/mcp-load/Cargo.toml \
    --target-dir target/peers
say "echo component for wassette"
cargo build --release --locked --target wasm32-wasip2 \
    --manifest-path bench/peers/wassette-echo/Cargo.toml --target-dir target/peers

# ----- wassette, from source, outside the repository -----------------------------------
if [ "$WASSETTE" = 1 ]; then
    mkdir -p "$PEER_BUILDS/bin"
    if [ -z "$WASSETTE_SRC" ]; then
        WASSETTE_SRC=$PEER_BUILDS/wassette.git
        if [ ! -d "$WASSETTE_SRC" ]; then
            say "cloning https://github.com/microsoft/wassette into $WASSETTE_SRC"
            git clone --bare https://github.com/microsoft/wassette "$WASSETTE_SRC" >&2 || {
                say "wassette: no source (give --wassette-src DIR); the table will say not run"
                exit 0
            }
        fi
    fi
    COMMIT=$(git -C "$WASSETTE_SRC" rev-parse --verify "$WASSETTE_REF^{commit}")
    SRC=$PEER_BUILDS/wassette-src-${COMMIT:0:12}
    if [ ! -f "$SRC/Cargo.toml" ]; then
        say "wassette $COMMIT: exporting the source into $SRC"
        rm -rf "$SRC" && mkdir -p "$SRC"
        # File by file, not `git archive`: a snapshot may lack its largest blobs (prebuilt
        # example components), which the build does not need.
        git -C "$WASSETTE_SRC" ls-tree -r -z "$COMMIT" |
            while IFS=$'\t' read -r -d '' meta path; do
                obj=${meta##* }
                if git -C "$WASSETTE_SRC" cat-file -e "$obj" 2>/dev/null; then
                    mkdir -p "$SRC/$(dirname "$path")"
                    git -C "$WASSETTE_SRC" cat-file blob "$obj" > "$SRC/$path"
                else
                    say "wassette source: $path is absent from the snapshot (skipped)"
                fi
            done
    fi
    say "wassette $COMMIT: building (target dir $PEER_BUILDS/wassette-target)"
    if cargo build --release --locked --manifest-path "$SRC/Cargo.toml" \
        --target-dir "$PEER_BUILDS/wassette-target" --bin wassette; then
        cp "$PEER_BUILDS/wassette-target/release/wassette" "$PEER_BUILDS/bin/wassette"
        printf '%s %s\n' "$COMMIT" "$(git -C "$WASSETTE_SRC" log -1 --format=%cs "$COMMIT")" \
            > "$PEER_BUILDS/bin/wassette.source"
    else
        say "wassette did not build; the table will say not run"
    fi
fi

say "ready: python3 bench/table.py --skip runtime,http,replicas,stdio,declarative   (peers only)"
