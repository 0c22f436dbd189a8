#!/bin/sh
# Install shoal as a systemd service, or remove it.
#
#   sudo systemd/install.sh                 # into / ; then: systemctl enable --now shoal
#   DESTDIR=/tmp/root systemd/install.sh    # into a staging tree (packaging, tests)
#   sudo systemd/install.sh --uninstall     # keeps /etc/shoal and /var/lib/shoal
#   sudo systemd/install.sh --purge         # removes those too
#
# Layout: /opt/shoal (its own virtual environment, with the `shoal` command),
# /usr/lib/systemd/system/shoal.service, /usr/lib/sysusers.d/shoal.conf,
# /etc/shoal/shoal.toml (never overwritten), docs in /opt/shoal/share/doc/shoal.
# PIP_OPTS passes options to pip (for example --no-index --find-links DIR), and
# SHOAL_PACKAGE names what to install (default: this source tree; "shoal"
# with --find-links installs a prebuilt wheel, offline).
set -eu

SRC=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
DESTDIR=${DESTDIR:-}
PREFIX=/opt/shoal
# The distribution's Python when it has 3.11 or later with venv: it is what
# the service should run (not an interpreter in somebody's home directory,
# which the service's user cannot read), and Debian builds it for speed.
if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    if /usr/bin/python3 -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        PYTHON=/usr/bin/python3
    fi
fi
UNIT=$DESTDIR/usr/lib/systemd/system/shoal.service
SYSUSERS=$DESTDIR/usr/lib/sysusers.d/shoal.conf

live() { [ -z "$DESTDIR" ] && [ -d /run/systemd/system ]; }

uninstall() {
    if live; then systemctl disable --now shoal.service 2>/dev/null || true; fi
    rm -f "$UNIT" "$SYSUSERS" "$DESTDIR/usr/local/share/man/man1/shoal.1" \
        "$DESTDIR/usr/local/share/bash-completion/completions/shoal" \
        "$DESTDIR/usr/local/share/zsh/site-functions/_shoal"
    rm -rf "$DESTDIR$PREFIX"
    if [ "${1:-}" = purge ]; then rm -rf "$DESTDIR/etc/shoal" "$DESTDIR/var/lib/shoal"; fi
    if live; then systemctl daemon-reload; fi
    echo "shoal removed${1:+ (purged)}"
}

case "${1:-}" in
    --uninstall) uninstall; exit 0 ;;
    --purge) uninstall purge; exit 0 ;;
    "") ;;
    *) echo "usage: $0 [--uninstall|--purge]" >&2; exit 2 ;;
esac

"$PYTHON" -m venv "$DESTDIR$PREFIX"
# The dependency versions are those of systemd/constraints.txt (`make lock`
# writes it), so two machines installed from one tree run the same code.
CONSTRAINTS=""
if [ -f "$SRC/systemd/constraints.txt" ]; then CONSTRAINTS="-c $SRC/systemd/constraints.txt"; fi
# shellcheck disable=SC2086  # PIP_OPTS and CONSTRAINTS are lists of options
"$DESTDIR$PREFIX/bin/pip" install -q --disable-pip-version-check ${PIP_OPTS:-} $CONSTRAINTS \
    "${SHOAL_PACKAGE:-$SRC}"
if [ -n "$DESTDIR" ]; then
    # Scripts name their interpreter by absolute path: point them at the
    # final location, not the staging tree.
    for f in "$DESTDIR$PREFIX"/bin/*; do
        if [ -f "$f" ] && head -c 2 "$f" | grep -q '#!'; then
            sed -i "1s|^#!$DESTDIR$PREFIX/|#!$PREFIX/|" "$f"
        fi
    done
fi
install -D -m 0644 "$SRC/systemd/shoal.service" "$UNIT"
install -D -m 0644 "$SRC/systemd/shoal.sysusers" "$SYSUSERS"
if [ ! -e "$DESTDIR/etc/shoal/shoal.toml" ]; then
    install -D -m 0644 "$SRC/systemd/shoal.toml" "$DESTDIR/etc/shoal/shoal.toml"
fi
mkdir -p "$DESTDIR$PREFIX/share/doc/shoal"
cp "$SRC"/docs/*.md "$SRC/README.md" "$DESTDIR$PREFIX/share/doc/shoal/"
# The man page and shell completion, generated from the CLI's parser.
install -D -m 0644 "$SRC/docs/shoal.1" "$DESTDIR/usr/local/share/man/man1/shoal.1"
mkdir -p "$DESTDIR/usr/local/share/bash-completion/completions" \
    "$DESTDIR/usr/local/share/zsh/site-functions"
"$DESTDIR$PREFIX/bin/python" -m shoal.daemon.cli completion bash \
    > "$DESTDIR/usr/local/share/bash-completion/completions/shoal"
"$DESTDIR$PREFIX/bin/python" -m shoal.daemon.cli completion zsh \
    > "$DESTDIR/usr/local/share/zsh/site-functions/_shoal"
if live; then
    systemd-sysusers shoal.conf 2>/dev/null || systemd-sysusers
    systemctl daemon-reload
    echo "installed; start it with: systemctl enable --now shoal"
else
    echo "installed into ${DESTDIR:-/}"
fi
