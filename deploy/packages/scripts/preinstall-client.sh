#!/bin/sh
set -e
if ! getent group aperio-client >/dev/null; then
	groupadd --system aperio-client
fi
if ! getent passwd aperio-client >/dev/null; then
	useradd --system --gid aperio-client --home-dir /nonexistent --no-create-home \
		--shell /usr/sbin/nologin --comment "Aperio client" aperio-client
fi
