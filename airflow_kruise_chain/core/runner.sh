#!/bin/sh
# airflow-kruise-chain stage runner: the fixed command of both slot containers of a chain pod.
#
# Runs the stage of generation $KC_GENERATION once, streams its output to the container log, records the
# outcome under $KC_SCRATCH/.chain/gen-N/ and announces it (a result line on stdout and in the termination
# message), then parks until the next swap. A generation that already finished is never run again; one
# that was killed mid-way is recorded as exit 137 (reason "interrupted"), and Airflow's retry decides.
#
# Stage images need /bin/sh (POSIX) and the usual coreutils/busybox tools: date, mkdir, chmod, mv, cat,
# wc, base64, tr, sleep.
#
# Inputs (downward-API env resolved at container start): KC_SLOT, KC_GENERATION, KC_STAGE, KC_COMMAND (one
# sh command line), KC_ENV (`export NAME='value'` lines), KC_OUTPUTS_MAX, KC_SCRATCH (default /scratch),
# KC_TERMINATION_LOG (default /dev/termination-log). The stage sees CHAIN_SCRATCH, CHAIN_OUTPUT (a file it
# may write its outputs to, as a JSON object) and CHAIN_GENERATION.

marker='::kruise-chain::'
scratch=${KC_SCRATCH:-/scratch}
termination_log=${KC_TERMINATION_LOG:-/dev/termination-log}
generation=${KC_GENERATION:-0}
limit=${KC_OUTPUTS_MAX:-16384}
case $limit in '' | *[!0-9]*) limit=16384 ;; esac
[ "$limit" -le 16384 ] || limit=16384

# UTC timestamps, with nanoseconds where date supports %N (GNU, busybox), else whole seconds.
now() {
	stamp=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ 2>/dev/null)
	case $stamp in
	*.[0-9]*Z) printf '%s\n' "$stamp" ;;
	*) date -u +%Y-%m-%dT%H:%M:%SZ ;;
	esac
}

# put FILE VALUE: write atomically (readers never see a partial file).
put() {
	printf '%s\n' "$2" >"$1.tmp" && mv -f "$1.tmp" "$1"
}

# One handler for the stop signals, set before anything else (as PID 1 the runner would otherwise ignore
# them; QUIT covers images whose STOPSIGNAL it is). While a stage runs, the signal is passed on to it as TERM
# (sh starts background jobs with INT and QUIT ignored); while its result is recorded, it is only counted
# (the runner leaves once the result is safe); otherwise the runner exits 0 at once.
phase=idle
signals=0
child=
on_stop() {
	signals=$((signals + 1))
	case $phase in
	stage) if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; fi ;;
	recording) ;;
	parked)
		kill "$!" 2>/dev/null # the current sleep: $! is set even if the signal came right after the fork
		exit 0
		;;
	*) exit 0 ;;
	esac
}
trap on_stop TERM INT QUIT

# Sleep until stopped: a runner must never end on its own (under restartPolicy Always it would run again).
park() {
	phase=parked
	while :; do
		sleep 3600 &
		wait $!
	done
}

# record EXIT_CODE REASON: write the result; exit_code is written last, it is what marks the generation done.
record() {
	started=$(cat "$dir/started")
	finished=$(now)
	outputs_file=$dir/outputs.json
	encoded=-
	if [ ! -s "$outputs_file" ]; then
		outputs_status=absent
	elif [ "$(($(wc -c <"$outputs_file")))" -gt "$limit" ]; then
		outputs_status=too-big
	elif ! command -v base64 >/dev/null 2>&1; then
		outputs_status=no-base64
	else
		encoded=$(base64 <"$outputs_file" | tr -d '\n')
		outputs_status=ok
	fi
	put "$dir/finished" "$finished"
	put "$dir/result" "$marker result gen=$generation stage=$KC_STAGE slot=$KC_SLOT exit=$1 reason=$2 started=$started finished=$finished outputs=$encoded outputs_status=$outputs_status"
	put "$dir/exit_code" "$1"
}

# Write the result as the termination message (the kubelet keeps at most 4096 bytes of it: large outputs
# are left to the log line), then print the result line.
announce() {
	line=$(cat "$dir/result")
	message=$line
	if [ "${#line}" -gt 4000 ]; then
		message="${line%% outputs=*} outputs=- outputs_status=truncated"
	fi
	{ printf '%s' "$message" >"$termination_log"; } 2>/dev/null || :
	printf '%s\n' "$line"
}

case $generation in
'' | 0) park ;;
*[!0-9]*)
	echo "$marker error: KC_GENERATION='$generation' is not a number; parking" >&2
	park
	;;
esac

dir=$scratch/.chain/gen-$generation
if ! mkdir -p "$dir"; then
	echo "$marker error: cannot create $dir" >&2
	exit 70
fi
# Stages may run as different users: let every one of them record its generations.
chmod 1777 "$scratch/.chain" 2>/dev/null

if [ -f "$dir/exit_code" ]; then
	announce
	park
fi
if [ -f "$dir/started" ]; then
	record 137 interrupted
	announce
	park
fi

phase=stage
started=$(now)
put "$dir/started" "$started"
printf '%s start gen=%s stage=%s slot=%s at=%s\n' "$marker" "$generation" "$KC_STAGE" "$KC_SLOT" "$started"
(
	if [ -z "$KC_COMMAND" ]; then
		echo "$marker error: KC_COMMAND is empty" >&2
		exit 127
	fi
	eval "$KC_ENV" || exit 126
	CHAIN_SCRATCH=$scratch CHAIN_OUTPUT=$dir/outputs.json CHAIN_GENERATION=$generation
	export CHAIN_SCRATCH CHAIN_OUTPUT CHAIN_GENERATION
	exec /bin/sh -c "$KC_COMMAND"
) &
child=$!
if [ "$signals" -gt 0 ]; then kill -TERM "$child" 2>/dev/null; fi # stopped before the fork: pass it on

while :; do
	seen=$signals
	wait "$child"
	code=$?
	[ "$seen" = "$signals" ] && break # no signal during this wait: $code is the stage's own
	kill -0 "$child" 2>/dev/null && continue # interrupted by a signal, the stage still runs
	# The stage ended as the signal came: ask again for its recorded status (127: already collected).
	wait "$child" 2>/dev/null
	again=$?
	[ "$again" -ne 127 ] && code=$again
	break
done

phase=recording
reason=completed
[ "$signals" -gt 0 ] && reason=terminated
record "$code" "$reason"
announce
phase=idle
[ "$signals" -gt 0 ] && exit 0 # stopped meanwhile: leave now rather than park until the kill
park
