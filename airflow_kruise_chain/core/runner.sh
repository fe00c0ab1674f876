# airflow-kruise-chain stage runner (v2): the main process of both slot containers of a chain pod, run by
# the static busybox the chain's init container copied next to it: `busybox sh runner.sh`. It uses only
# that busybox (its shell builtins and `$kc_bb APPLET`), never the stage image's tools, so stage images
# need nothing (distroless and scratch images work).
#
# Long-lived: it parks, and runs each generation its slot is given once, without a container restart.
# The slot's run spec (the pod annotation airflow-kruise-chain/<slot>.run, see core/wire.py) reaches it
# as env KC_RUN when the container starts and as the file $KC_META/<slot> of a downwardAPI volume, which
# the kubelet rewrites when the annotation changes. It polls that file with a builtin read and waits in
# between with `read -t` on its tick FIFO (no process is started while it waits): every 0.1 s, and every
# 0.02 s for the next 250 polls (about 5 s) after it started or any slot of the pod finished a generation,
# when the operator's next run spec is due (the runner that finished it writes a line into the other
# slots' tick FIFOs: a nudge). Idle, it costs what the 0.1 s poll costs; a lost nudge only leaves a start
# to the 0.1 s poll. Records live in $KC_STATE (an emptyDir the slots share, never under $CHAIN_SCRATCH):
# gen-N/started, gen-N/result, gen-N/exit_code (written last: the generation is done).
# A generation that finished is never run again; one that was killed mid-way is recorded as exit 137
# (interrupted); one whose records are gone is not run again (exit 70, reason lost-record).
#
# The stage gets exactly its argv (exec -a: argv[0] as given, resolved on the stage's PATH as a runtime
# does) and exactly the container's env as the runtime gave it (read from /proc/self/environ, without the
# runner's KC_* variables) plus the stage's env and CHAIN_SCRATCH, CHAIN_OUTPUT, CHAIN_GENERATION; the
# generation's token is never in it. Results are announced as a line starting with the marker, carrying
# the generation and its token (and in the termination message); the slot's readiness probe reads
# $KC_STATE/<slot>.parked, the generation it parked on. Markers go to stdout and to stderr (a runtime copies
# the two streams into the log apart: only both copies say that all of the stage's output is in).

kc_bb=${0%/*}/busybox
kc_marker='::kruise-chain::'
kc_slot=${KC_SLOT:-slot}
kc_state=${KC_STATE:-/kruise-chain/state}
kc_meta=${KC_META:-/kruise-chain-meta}/$kc_slot
kc_scratch=${KC_SCRATCH:-/scratch}
kc_term=${KC_TERMINATION_LOG:-/dev/termination-log}
kc_parked=$kc_state/$kc_slot.parked

# One handler for the stop signals, set before anything else (as PID 1 the runner would otherwise ignore
# them). While a stage runs, the signal is passed on to it as TERM (sh starts background jobs with INT and
# QUIT ignored); while its result is recorded, it is only counted (the runner leaves once the result is
# safe); otherwise the runner exits 0 at once.
kc_phase=idle
kc_signals=0
kc_child=
kc_on_stop() {
	kc_signals=$((kc_signals + 1))
	case $kc_phase in
	stage) if [ -n "$kc_child" ]; then kill -TERM "$kc_child" 2>/dev/null; fi ;;
	recording) ;;
	*) exit 0 ;;
	esac
}
trap kc_on_stop TERM INT QUIT

# kc_q VALUE: kc_q is set to VALUE single-quoted for sh (builtins only).
kc_quote() {
	kc_r=$1
	kc_q=
	while :; do
		case $kc_r in
		*\'*)
			kc_q="$kc_q${kc_r%%\'*}'\\''"
			kc_r=${kc_r#*\'}
			;;
		*) break ;;
		esac
	done
	kc_q="'$kc_q$kc_r'"
}

# UTC timestamps with a fraction: date's %N where busybox has it, else the kernel clock as adjtimex reads it
# (no privilege needed to read it), else whole seconds.
kc_now() {
	kc_stamp=$("$kc_bb" date -u +%Y-%m-%dT%H:%M:%S.%NZ 2>/dev/null)
	case $kc_stamp in *.[0-9]*Z) return ;; esac
	kc_adj=$("$kc_bb" adjtimex 2>/dev/null)
	kc_ts=${kc_adj#*tv_sec:}
	kc_ts=${kc_ts%%time.tv_usec*}
	kc_tu=${kc_adj#*tv_usec:}
	kc_tu=${kc_tu%%return*}
	set -- $kc_ts $kc_tu
	case "$#:$1:$2" in
	2:[0-9]*:[0-9]*)
		kc_stamp=$("$kc_bb" date -u -d "@$1" +%Y-%m-%dT%H:%M:%S)
		kc_stamp=$kc_stamp.$(printf '%06d' "$2")Z
		;;
	*) kc_stamp=$("$kc_bb" date -u +%Y-%m-%dT%H:%M:%SZ) ;;
	esac
}

# The container's env exactly as the runtime gave it, as sh: first unset every name the shell exports (the
# runtime's and those sh adds itself), then export the runtime's values again, KC_* left out. xargs splits
# /proc/self/environ on its NULs and hands the entries to `runner.sh --capture-env`.
kc_capture_env() {
	{
		printf 'unset SHLVL PWD OLDPWD PATH\n'
		"$kc_bb" xargs -0 "$kc_bb" sh "$0" --capture-env <"/proc/$$/environ"
	} >"$kc_env.tmp" && "$kc_bb" mv -f "$kc_env.tmp" "$kc_env"
}
if [ "$1" = --capture-env ]; then
	shift
	kc_names=
	kc_body=
	for kc_kv; do
		kc_n=${kc_kv%%=*}
		case $kc_n in "" | [0-9]* | *[!A-Za-z0-9_]*) continue ;; esac
		kc_names="$kc_names $kc_n"
		case $kc_n in KC_*) continue ;; esac
		kc_quote "${kc_kv#*=}"
		kc_body="$kc_body
export $kc_n=$kc_q"
	done
	[ -z "$kc_names" ] || printf 'unset%s%s\n' "$kc_names" "$kc_body"
	exit 0
fi

# kc_exec ARGV...: exec the stage as a runtime would: argv[0] as given, found on $PATH unless it has a '/'.
kc_exec() {
	kc_a0=$1
	shift
	case $kc_a0 in
	*/*) kc_p=$kc_a0 ;;
	*)
		kc_p=
		kc_rest=${PATH-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}
		while :; do
			kc_d=${kc_rest%%:*}
			if [ -f "${kc_d:-.}/$kc_a0" ] && [ -x "${kc_d:-.}/$kc_a0" ]; then
				kc_p=${kc_d:-.}/$kc_a0
				break
			fi
			case $kc_rest in *:*) kc_rest=${kc_rest#*:} ;; *) break ;; esac
		done
		if [ -z "$kc_p" ]; then
			printf '%s error: exec: "%s": executable file not found in $PATH\n' "$kc_marker" "$kc_a0" >&2
			exit 127
		fi
		;;
	esac
	exec -a "$kc_a0" "$kc_p" "$@"
}

# The newest run spec: the one in env at container start, or the volume's file once it is newer. A spec
# defines kc_g (generation), kc_t (token), kc_s (stage), kc_m (outputs limit), kc_stage_env, kc_stage_argv.
kc_g=0
kc_t=
kc_s=
kc_m=16384
kc_r=0
kc_skip=0
if [ -n "$KC_RUN" ]; then eval "$KC_RUN"; fi
# A spec read from the volume with kc_r=1 came with an image patch: this container is about to be stopped
# for the new image, whose runner gets the spec in env. It is left alone (kc_skip).
kc_poll() {
	kc_line=
	{ read -r kc_line <"$kc_meta"; } 2>/dev/null
	kc_f=${kc_line#kc_g=}
	case $kc_f in '' | *[!0-9]*) return ;; esac
	if [ "$kc_f" -gt "$kc_g" ]; then
		kc_r=0
		. "$kc_meta"
		[ "$kc_r" = 1 ] && kc_skip=$kc_g
	fi
}

# kc_record EXIT_CODE REASON: write the result; exit_code is written last, it marks the generation done.
kc_record() {
	{ read -r kc_started <"$kc_dir/started"; } 2>/dev/null || kc_started=$kc_stamp
	kc_now
	kc_out=$kc_dir/outputs.json
	kc_enc=-
	case $kc_m in '' | *[!0-9]*) kc_m=16384 ;; esac
	[ "$kc_m" -le 16384 ] || kc_m=16384
	if [ ! -s "$kc_out" ]; then
		kc_os=absent
	elif [ "$("$kc_bb" wc -c <"$kc_out")" -gt "$kc_m" ]; then
		kc_os=too-big
	else
		kc_enc=$("$kc_bb" base64 <"$kc_out" | "$kc_bb" tr -d '\n')
		kc_os=ok
	fi
	printf '%s result gen=%s token=%s stage=%s slot=%s exit=%s reason=%s started=%s finished=%s outputs=%s outputs_status=%s streams=2\n' \
		"$kc_marker" "$kc_g" "$kc_t" "$kc_s" "$kc_slot" "$1" "$2" "$kc_started" "$kc_stamp" "$kc_enc" \
		"$kc_os" >"$kc_dir/result"
	printf '%s\n' "$1" >"$kc_dir/exit_code"
}

# Announce the result: the termination message (the kubelet keeps at most 4096 bytes: large outputs are
# left to the log line) and the result line on each stream, on a line of its own (the stage may have left
# one unended).
kc_announce() {
	{ read -r kc_res <"$kc_dir/result"; } 2>/dev/null || kc_res=
	kc_msg=$kc_res
	if [ "${#kc_res}" -gt 4000 ]; then kc_msg="${kc_res%% outputs=*} outputs=- outputs_status=truncated"; fi
	{ printf '%s' "$kc_msg" >"$kc_term"; } 2>/dev/null
	printf '\n%s\n' "$kc_res"
	printf '\n%s\n' "$kc_res" >&2
	printf '%s\n' "$kc_g" >"$kc_parked"
}

kc_run() {
	kc_dir=$kc_state/gen-$kc_g
	if [ -f "$kc_dir/exit_code" ]; then
		kc_announce
		return
	fi
	if [ -f "$kc_dir/started" ]; then
		kc_record 137 interrupted
		kc_announce
		return
	fi
	kc_hwm=0
	{ read -r kc_hwm <"$kc_state/$kc_slot.started"; } 2>/dev/null
	case $kc_hwm in '' | *[!0-9]*) kc_hwm=0 ;; esac
	if [ "$kc_g" -le "$kc_hwm" ]; then
		# started before in this slot, and its records are gone: never run it again
		"$kc_bb" mkdir -p "$kc_dir"
		kc_now
		printf '%s\n' "$kc_stamp" >"$kc_dir/started"
		echo "$kc_marker error: the records of generation $kc_g are gone; not running it again" >&2
		kc_record 70 lost-record
		kc_announce
		return
	fi
	: >"$kc_parked"
	if ! "$kc_bb" mkdir -p "$kc_dir"; then
		echo "$kc_marker error: cannot create $kc_dir" >&2
		exit 70
	fi
	printf '%s\n' "$kc_g" >"$kc_state/$kc_slot.started"
	kc_now
	printf '%s\n' "$kc_stamp" >"$kc_dir/started"
	kc_phase=stage
	kc_start="$kc_marker start gen=$kc_g token=$kc_t stage=$kc_s slot=$kc_slot at=$kc_stamp"
	printf '%s\n' "$kc_start"
	printf '%s\n' "$kc_start" >&2
	(
		. "$kc_env"
		kc_stage_env
		CHAIN_SCRATCH=$kc_scratch CHAIN_OUTPUT=$kc_dir/outputs.json CHAIN_GENERATION=$kc_g
		export CHAIN_SCRATCH CHAIN_OUTPUT CHAIN_GENERATION
		exec 3>&- # the tick FIFO is the runner's: the stage gets only the container's streams
		kc_stage_argv
	) &
	kc_child=$!
	if [ "$kc_signals" -gt 0 ]; then kill -TERM "$kc_child" 2>/dev/null; fi # stopped before the fork
	while :; do
		kc_seen=$kc_signals
		wait "$kc_child"
		kc_code=$?
		[ "$kc_seen" = "$kc_signals" ] && break # no signal during this wait: the stage's own status
		kill -0 "$kc_child" 2>/dev/null && continue # interrupted by a signal, the stage still runs
		# The stage ended as the signal came: ask again for its recorded status (127: already collected).
		wait "$kc_child" 2>/dev/null
		kc_again=$?
		[ "$kc_again" -ne 127 ] && kc_code=$kc_again
		break
	done
	kc_phase=recording
	kc_reason=completed
	[ "$kc_signals" -gt 0 ] && kc_reason=terminated
	kc_record "$kc_code" "$kc_reason"
	kc_announce
	kc_phase=idle
	[ "$kc_signals" -gt 0 ] && exit 0 # stopped meanwhile: leave now rather than park until the kill
}

kc_env=$kc_state/$kc_slot.env
if ! "$kc_bb" mkdir -p "$kc_state" || ! kc_capture_env; then
	echo "$kc_marker error: cannot write the runner's state under $kc_state" >&2
	exit 70
fi
kc_tick=$kc_state/$kc_slot.tick
[ -p "$kc_tick" ] || "$kc_bb" mkfifo "$kc_tick"
exec 3<>"$kc_tick"

# kc_nudge: a generation of this slot finished, so the operator's next run spec is due, most likely for the
# other slot: a line in each other slot's tick FIFO makes its runner poll fast. Opened read-write, so the
# open never blocks, and only if it is a FIFO (never creating a file); a line written while no runner holds
# the FIFO open is dropped with it.
kc_nudge() {
	for kc_f in "$kc_state"/*.tick; do
		if [ "$kc_f" != "$kc_tick" ] && [ -p "$kc_f" ]; then
			{ printf '\n' 1<>"$kc_f"; } 2>/dev/null
		fi
	done
}

# Fast polls left (KC_HOT_POLLS, 250 by default, sets how many follow a start or a nudge).
kc_hot_polls=${KC_HOT_POLLS:-250}
case $kc_hot_polls in '' | *[!0-9]*) kc_hot_polls=250 ;; esac
kc_hot=$kc_hot_polls
kc_done=0
[ -f "$kc_parked" ] || printf '0\n' >"$kc_parked"
while :; do
	kc_poll
	if [ "$kc_g" -gt "$kc_done" ] && [ "$kc_g" != "$kc_skip" ]; then
		kc_run
		kc_done=$kc_g
		kc_nudge
		kc_hot=$kc_hot_polls
		continue
	fi
	kc_phase=parked
	kc_wait=0.1
	if [ "$kc_hot" -gt 0 ]; then
		kc_wait=0.02
		kc_hot=$((kc_hot - 1))
	fi
	read -t "$kc_wait" kc_x <&3 && kc_hot=$kc_hot_polls # a nudge
	kc_phase=idle
done
