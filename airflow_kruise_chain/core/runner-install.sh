#!/bin/busybox sh
# shellcheck shell=sh # busybox ash, checked as POSIX sh
# airflow-kruise-chain runner image: installs the stage runner into a chain pod. The chain pod's init
# container runs this file, /kruise-chain-runner/install (the kernel runs its `#!` line), with
# KC_RUNNER_SHA256, the sha256 of this provider's runner (/kruise-chain-runner/runner, core/runner.sh)
# followed by this file. Files that are not exactly the provider's (an older or newer image) are refused:
# exit 65, the reason in the termination message. Otherwise the runner (mode 0555: its shell reads it, the
# slots exec it) and the image's static busybox, execute-only (mode 0111: a process that execs a file its
# user cannot read is not dumpable, so the stages, of the runner's user, cannot reach the runner's memory, see
# core/manifest.py UNREADABLE_RUNNER_CAPABILITIES) are copied into the runner's emptyDir, each renamed into
# place.
b=/bin/busybox
src=${0%/*}
dst=/kruise-chain/bin
h=$("$b" cat "$src/runner" "$src/install" 2>/dev/null | "$b" sha256sum)
h=${h%% *}
if [ "$h" != "$KC_RUNNER_SHA256" ]; then
	m="its runner files have sha256 $h, this provider's ${KC_RUNNER_SHA256:-(none given)}"
	{ printf %s "$m" >/dev/termination-log; } 2>/dev/null
	echo "$m" >&2
	exit 65
fi
set -e
"$b" mkdir -p "$dst"
"$b" cp "$src/runner" "$dst/runner.new"
"$b" chmod 0555 "$dst/runner.new"
"$b" mv -f "$dst/runner.new" "$dst/runner"
"$b" cp "$b" "$dst/busybox.new"
"$b" chmod 0111 "$dst/busybox.new"
"$b" mv -f "$dst/busybox.new" "$dst/busybox"
