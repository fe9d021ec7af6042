#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	for u in $(systemctl list-units --plain --no-legend 'aperio-client@*' 2>/dev/null | awk '{print $1}'); do
		systemctl stop "$u" >/dev/null 2>&1 || true
	done
fi
