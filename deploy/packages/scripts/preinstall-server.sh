#!/bin/sh
# The aperio user exists before the files are unpacked, so the state
# directory and config can be given to it.
set -e
if ! getent group aperio >/dev/null; then
	groupadd --system aperio
fi
if ! getent passwd aperio >/dev/null; then
	useradd --system --gid aperio --home-dir /var/lib/aperio --no-create-home \
		--shell /usr/sbin/nologin --comment "Aperio server" aperio
fi
