#!/bin/sh
# version.sh [DIR]: the semantic version of the checkout in DIR (default:
# the current directory), from its git tags. The Makefile, deploy/release
# and deploy/images stamp it into the binaries; deploy/packages turns it
# into the packages' version (1.2.4~dev.3+g… for dpkg and rpm).
#
#   HEAD is tag v1.2.3, clean              v1.2.3
#   3 commits after v1.2.3                 v1.2.4-dev.3+g0123456789ab
#   3 commits after v1.3.0-rc.1            v1.3.0-rc.1.dev.3+g0123456789ab
#   no release tag (N commits in all)      v0.0.0-dev.N+g0123456789ab
#   uncommitted changes to tracked files   ….dirty appended (v1.2.3 becomes
#                                          v1.2.4-dev.0+g0123456789ab.dirty)
#   not a git checkout                     v0.0.0-dev
#
# Each sorts where it belongs: after the tag it follows, before the next
# release, and dev builds of one line by their count of commits. Only tags
# of the form vMAJOR.MINOR.PATCH[-PRERELEASE] count as releases.
set -eu
cd "${1:-.}"
if ! commit=$(git rev-parse --short=12 HEAD 2>/dev/null); then
	echo v0.0.0-dev
	exit 0
fi
dirty=
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	dirty=.dirty
fi
meta="+g$commit$dirty"
semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$'
tag=
for t in $(git -c versionsort.suffix=- tag --merged HEAD --sort=-v:refname --list 'v[0-9]*' 2>/dev/null); do
	if printf '%s\n' "$t" | grep -Eq "$semver"; then
		tag=$t
		break
	fi
done
if [ -z "$tag" ]; then
	echo "v0.0.0-dev.$(git rev-list --count HEAD)$meta"
	exit 0
fi
n=$(git rev-list --count "$tag..HEAD")
if [ "$n" = 0 ] && [ -z "$dirty" ]; then
	echo "$tag"
	exit 0
fi
case $tag in
*-*)
	# A pre-release: later commits extend its identifiers, which sorts
	# them after it and before the next pre-release or the release.
	echo "$tag.dev.$n$meta"
	;;
*)
	core=${tag#v}
	major=${core%%.*}
	rest=${core#*.}
	minor=${rest%%.*}
	patch=${rest#*.}
	echo "v$major.$minor.$((patch + 1))-dev.$n$meta"
	;;
esac
