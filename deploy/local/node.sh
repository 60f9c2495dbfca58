#!/usr/bin/env bash
# Installs Node.js and npm from Debian's packages when they are missing:
# the TypeScript parts (examples/receiver-node, openapi/tscheck) need them.
set -euo pipefail
command -v node >/dev/null && command -v npm >/dev/null && exit 0
if ! command -v apt-get >/dev/null; then
  echo "node.sh: Node.js 20 and npm are needed; install them" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm >/dev/null
node --version
