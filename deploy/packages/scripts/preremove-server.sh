#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl stop aperio-server.service >/dev/null 2>&1 || true
	systemctl disable aperio-server.service >/dev/null 2>&1 || true
fi
