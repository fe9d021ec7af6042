#!/bin/sh
# The store in /var/lib/aperio and the users are kept, even on purge:
# removing a package must not delete an operator's data.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
