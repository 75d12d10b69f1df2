#!/usr/bin/env bash
# Install what `specgate report` and the browser test of the HTML report need, idempotently:
#   - the Allure 2 command line (npm package allure-commandline 2.x, which runs on Java 17) as `allure`;
#   - Debian's chromium (with fonts) for the headless browser test, and Playwright's Python client to drive it
#     (the client only: the test starts /usr/bin/chromium, so no browser is downloaded).
# Re-running is cheap: every step is skipped when its tool already answers. Needs root (or sudo) for apt-get.
# Arguments name the tools to install (allure, chromium, playwright); none: all three (a CI job that only writes
# the HTML report needs `allure`).
# Environment: SPECGATE_TOOLS_DIR (default /opt/specgate-tools), PYTHON (default: python, else python3).
set -euo pipefail

ALLURE_VERSION="${ALLURE_VERSION:-2.46.1}"
TOOLS_DIR="${SPECGATE_TOOLS_DIR:-/opt/specgate-tools}"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

need_java() {
    if ! command -v java >/dev/null; then
        echo "install-report-tools: installing Java 17 for the Allure CLI"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless
    fi
}

install_allure() {
    if command -v allure >/dev/null && allure --version 2>/dev/null | grep -q "^${ALLURE_VERSION}$"; then
        echo "install-report-tools: allure $(allure --version) already installed"
        return
    fi
    need_java
    echo "install-report-tools: installing allure-commandline@${ALLURE_VERSION} into ${TOOLS_DIR}"
    $SUDO mkdir -p "$TOOLS_DIR"
    $SUDO npm install --prefix "$TOOLS_DIR" --no-audit --no-fund --loglevel=error "allure-commandline@${ALLURE_VERSION}"
    $SUDO ln -sf "$TOOLS_DIR/node_modules/allure-commandline/dist/bin/allure" /usr/local/bin/allure
    allure --version
}

install_chromium() {
    if command -v chromium >/dev/null; then
        echo "install-report-tools: $(chromium --version 2>/dev/null) already installed"
        return
    fi
    echo "install-report-tools: installing Debian chromium"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        chromium fonts-dejavu-core fonts-liberation
    chromium --version
}

install_playwright() {
    if "$PYTHON" -c "import playwright.sync_api" 2>/dev/null; then
        echo "install-report-tools: playwright (Python client) already installed"
        return
    fi
    echo "install-report-tools: installing the Playwright Python client into $("$PYTHON" -c 'import sys; print(sys.prefix)')"
    "$PYTHON" -m pip install --quiet "playwright>=1.45"
}

TOOLS=("$@")
if [ ${#TOOLS[@]} -eq 0 ]; then TOOLS=(allure chromium playwright); fi
for tool in "${TOOLS[@]}"; do
    case "$tool" in
        allure) install_allure ;;
        chromium) install_chromium ;;
        playwright) install_playwright ;;
        *) echo "install-report-tools: unknown tool '$tool' (allowed: allure, chromium, playwright)" >&2; exit 2 ;;
    esac
done
