#!/kruise-chain/bin/busybox sh
# shellcheck shell=sh # busybox ash, checked as POSIX sh: its extensions are annotated where they stand
# airflow-kruise-chain stage runner (v4, sealed stages, their filesystem too): the main process of both slot
# containers of a chain pod, installed by the chain's init container as /kruise-chain/bin/runner (mode 0555)
# next to the image's static busybox (mode 0111). The slots' command is that one path: the kernel runs the
# `#!` line above, `/kruise-chain/bin/busybox sh /kruise-chain/bin/runner ARGS` ($0 is the runner's path, so
# `${0%/*}` is its folder), and checks the busybox it loads: execute-only, it makes the runner not dumpable
# (fs/exec.c begin_new_exec, would_dump on the interpreter; see core/manifest.py
# UNREADABLE_RUNNER_CAPABILITIES). It uses
# only that busybox (its shell builtins and `$kc_bb APPLET`), never the stage image's tools, so stage images
# need nothing (distroless and scratch images work). Both files sit on a volume the slots mount read-only.
#
# Long-lived: it parks, and runs each generation its slot is given once, without a container restart.
# The slot's run spec (the pod annotation airflow-kruise-chain/<slot>.run, see core/wire.py) reaches it
# as env KC_RUN when the container starts and as the file $KC_META/<slot> of the slot's own downwardAPI
# volume (only this slot's items), which the kubelet rewrites when the annotation changes. It polls that
# file with a builtin read and waits in between with `read -t` on a private FIFO (no process is started
# while it waits): every 0.1 s, and every 0.02 s for the next 250 polls (about 5 s) after it started or
# finished a generation.
#
# Sealed like a container (a stage runs as the runner's user, in its container):
# - Nothing a stage starts outlives it. The runner is pid 1 of the container's pid namespace (a runtime
#   execs the container's command as pid 1): when the stage's process ends (or is stopped), it ends every
#   other process of the container BEFORE it records the result: the stage's at once, what the kubelet exec'd
#   into it (kc_scan) after about 2 s (`kill -KILL -1`, which spares pid 1 only).
#   Not pid 1 (shareProcessNamespace, tests), it ends its descendants by their parent pids: best effort.
# - Nothing a stage writes changes what the runner does. The runner's own files are read-only; the slot's
#   state ($KC_STATE, an emptyDir of this slot only) holds records only: gen-N/started, gen-N/result,
#   gen-N/exit_code (written last: the generation is done), <slot>.started (the newest generation this slot
#   started) and <slot>.serving (the runner serves the slot: the startup probe's). Once the stage's
#   processes are gone, the runner empties the state and writes the generation's records afresh, so
#   whatever a stage left there (a FIFO, a bumped counter, a planted record) is gone before the slot's next
#   generation; records are read only through checks that refuse anything but a regular file. A stage that
#   gave the state or the termination log to another user or took their modes off (as root) cannot lock the
#   runner out: it has the stage's rights and undoes it (kc_reclaim, kc_terminate). The captured
#   env stays in the runner's memory; nothing is sourced or executed from a path a stage can write, but for
#   the fast go's file below, which is read only while no stage process is left.
# - Nothing a stage writes reaches a later stage of its slot but through the scratch. The slot's root
#   filesystem is read-only (`readOnlyRootFilesystem`: a same-image swap keeps the container and its layer);
#   what a stage may write besides the scratch is the slot's own temporary folders ($KC_TMP: /tmp and
#   /dev/shm, volumes of this slot only), which the runner empties once the stage's processes are gone
#   (kc_clean, at its start too) and finds empty before it starts the next stage (kc_pristine), with a fresh
#   empty HOME in the first of them (.kruise-chain-home); and, as root, /dev (the runtime's tmpfs, not the
#   layer): a generation that changed it (a planted file, a replaced /dev/null or /dev/stdout) is the
#   container's last: the runner records its result, then exits, and the kubelet starts the container afresh
#   with a new /dev (kc_devices).
# - A generation that finished is never run again; one that was killed mid-way is recorded as exit 137
#   (interrupted); one whose records are gone is not run again (exit 70, reason lost-record).
# - No stage knows a token (kc_tokens), so no stage can print a result line the operator takes.
#
# The fast go (core/fastgo.py): `runner --go LENGTH`, run through `pods/exec` in the parked slot by the
# task that just patched the run spec annotation, puts the same spec in $KC_STATE/<slot>.go (renamed into
# place) and wakes the runner (SIGUSR1, if pid 1 is this slot's runner), which then does not wait for the
# kubelet's volume refresh. The runner takes the newer generation of the two places (a tie: the volume's)
# and runs each generation once, so the two deliveries may come in any order, twice or not at all, and one
# older than the runner's newest generation never starts. The file is out of a stage's reach: the state is
# this slot's only, and the runner removes the file at its start and empties the state when a generation
# starts and when it ends (once the stage's processes are gone); it reads the file only while parked.
#
# The capture (a go into a slot prepared ahead, whose task may not read the slot's log yet: the kubelet serves
# it once its status shows the new container): the stage's stdout and stderr are pipes read by the runner's
# own `tee`s, which copy every byte to the container's streams (the log) and the first 1 MiB of each into the
# generation's records (kc_capture_open); the result is recorded once they drained. `runner --go LENGTH
# SECONDS` then stays, waits for the generation's records and prints them as one frame (kc_await).
#
# Replay: the annotation airflow-kruise-chain/<slot>.replay ("GENERATION NONCE", the file
# $KC_META/<slot>.replay), read while parked, has the generation it parked on announced again from its
# records when its result line was rotated out of the slot's log (kc_replay).
#
# Stop: the kubelet's SIGTERM while a stage runs is passed to it; so is a stop request, the annotation
# airflow-kruise-chain/<slot>.stop ("GENERATION GRACE_SECONDS", the file $KC_META/<slot>.stop), which the
# runner reads while the stage runs: SIGTERM to the stage, SIGKILL to all of it after the grace, recorded
# as reason `stopped` and parked (no container restart).
#
# The stage gets exactly its argv (exec -a: argv[0] as given, resolved on the stage's PATH as a runtime
# does) and exactly the container's env as the runtime gave it (as the runner's shell inherited it, without
# the runner's KC_* variables) plus the stage's env and CHAIN_SCRATCH, CHAIN_OUTPUT, CHAIN_GENERATION. Results
# are announced as a line starting with the marker, carrying the generation and its token (and in the
# termination message). Each stream's begin and end is marked once (a runtime copies the two streams into the
# log apart: only both ends say that all of the stage's output is in): the start and result lines on stdout,
# `stderr-start` and `stderr-end` lines on stderr.

kc_bb=${0%/*}/busybox
kc_marker='::kruise-chain::'
kc_slot=${KC_SLOT:-slot}
kc_state=${KC_STATE:-/kruise-chain-state}
kc_meta=${KC_META:-/kruise-chain-meta}/$kc_slot
kc_stopfile=$kc_meta.stop
kc_replayfile=$kc_meta.replay
kc_scratch=${KC_SCRATCH:-/scratch}
kc_term=${KC_TERMINATION_LOG:-/dev/termination-log}
kc_serving=$kc_state/$kc_slot.serving
kc_hwmfile=$kc_state/$kc_slot.started
kc_tmp=${KC_TMP-}
kc_home=
[ -z "$kc_tmp" ] || kc_home=${kc_tmp%% *}/.kruise-chain-home
kc_renew=

# One handler for the stop signals, set before anything else (as PID 1 the runner would otherwise ignore
# them). While a stage runs, the signal is passed on to it as TERM (sh starts background jobs with INT and
# QUIT ignored); while its result is recorded, it is only counted (the runner leaves once the result is
# safe); otherwise the runner exits 0 at once. SIGCHLD and SIGUSR1 (a fast go) only wake the runner's waits.
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
trap : CHLD USR1

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

# The container's env exactly as the runtime gave it, as sh: first unset every name the shell exports (the
# runtime's and those sh adds itself), then export the runtime's values again, KC_* left out. xargs splits
# `env -0` on its NULs and hands the entries to `runner --capture-env`.
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

# kc_birth PID: kc_born is "PID STARTTIME", STARTTIME the process's start (clock ticks after boot,
# /proc/PID/stat's field 22, shown whatever the process's dumpability); empty if there is no such process.
kc_birth() {
	kc_born=
	kc_st=
	{ read -r kc_st <"/proc/$1/stat"; } 2>/dev/null || return 1
	# shellcheck disable=SC2086 # split on purpose: /proc/PID/stat's fields after comm (no glob chars)
	set -- ${kc_st##*) }
	kc_born="${kc_st%% *} ${20-}"
}

# kc_serves: <slot>.serving says that a runner serves the slot and names it ("PID STARTTIME", kc_serve),
# and that process is still the one running: the record of THIS container's runner. The state outlives the
# container: an earlier container's record (its runner was pid 1 too) names a pid 1 started earlier, a
# record of a runner outside a pid namespace of its own (tests) a pid gone or reused since. The new runner
# removes the earlier container's fast go and record at its start, and only then makes its own.
kc_serves() {
	kc_line=
	if [ -f "$kc_serving" ] && [ ! -h "$kc_serving" ]; then { read -r kc_line <"$kc_serving"; } 2>/dev/null; fi
	case $kc_line in '' | *[!0-9\ ]* | *' '*' '*) return 1 ;; esac
	kc_birth "${kc_line%% *}" && [ "$kc_born" = "$kc_line" ]
}

# `runner --up`, the slots' startup probe (the kubelet execs it in the container): wait until this
# container's runner serves the slot (kc_serves) rather than fail while it starts (a failed probe is an
# `Unhealthy` warning event), nor pass on an earlier container's record. The kubelet's timeout ends a wait
# that lasts.
if [ "$1" = --up ]; then
	until kc_serves; do "$kc_bb" sleep 0.05; done
	exit 0
fi

# kc_civil SECONDS: kc_stamp is the UTC time SECONDS after the epoch as YYYY-MM-DDTHH:MM:SS, by shell
# arithmetic alone (the days to a civil date as in Howard Hinnant's `civil_from_days`; the epoch's day 0 is
# day 719468 of the era count from 0000-03-01).
kc_civil() {
	kc_cz=$(($1 / 86400 + 719468))
	kc_cs=$(($1 % 86400))
	kc_ce=$((kc_cz / 146097))
	kc_cd=$((kc_cz - kc_ce * 146097))
	kc_cy=$(((kc_cd - kc_cd / 1460 + kc_cd / 36524 - kc_cd / 146096) / 365))
	kc_cd=$((kc_cd - (365 * kc_cy + kc_cy / 4 - kc_cy / 100)))
	kc_cm=$(((5 * kc_cd + 2) / 153))
	kc_cd=$((kc_cd - (153 * kc_cm + 2) / 5 + 1))
	kc_cy=$((kc_cy + kc_ce * 400))
	if [ "$kc_cm" -lt 10 ]; then kc_cm=$((kc_cm + 3)); else kc_cm=$((kc_cm - 9)) kc_cy=$((kc_cy + 1)); fi
	kc_stamp=$kc_cy-$((kc_cm / 10))$((kc_cm % 10))-$((kc_cd / 10))$((kc_cd % 10))
	kc_stamp=${kc_stamp}T$((kc_cs / 36000))$((kc_cs / 3600 % 10)):$((kc_cs / 600 % 6))$((kc_cs / 60 % 10))
	kc_stamp=$kc_stamp:$((kc_cs % 60 / 10))$((kc_cs % 10))
}

# UTC timestamps with a fraction: the shell's EPOCHREALTIME where busybox ash has it (no process started),
# else date's %N where busybox has it, else the kernel clock as adjtimex reads it (no privilege needed to
# read it), else whole seconds.
kc_now() {
	# shellcheck disable=SC3028 # busybox ash's (ASH_BASH_COMPAT), else unset: date below
	kc_e=${EPOCHREALTIME-}
	case $kc_e in
	[0-9]*.[0-9]*)
		case ${kc_e%.*}${kc_e#*.} in *[!0-9]*) ;; *)
			kc_civil "${kc_e%.*}"
			kc_stamp=$kc_stamp.${kc_e#*.}Z
			return
			;;
		esac
		;;
	esac
	kc_stamp=$("$kc_bb" date -u +%Y-%m-%dT%H:%M:%S.%NZ 2>/dev/null)
	case $kc_stamp in *.[0-9]*Z) return ;; esac
	kc_adj=$("$kc_bb" adjtimex 2>/dev/null)
	kc_ts=${kc_adj#*tv_sec:}
	kc_ts=${kc_ts%%time.tv_usec*}
	kc_tu=${kc_adj#*tv_usec:}
	kc_tu=${kc_tu%%return*}
	# shellcheck disable=SC2086 # split on purpose: adjtimex's seconds and microseconds (digits)
	set -- $kc_ts $kc_tu
	case "$#:$1:$2" in
	2:[0-9]*:[0-9]*)
		kc_stamp=$("$kc_bb" date -u -d "@$1" +%Y-%m-%dT%H:%M:%S)
		kc_stamp=$kc_stamp.$(printf '%06d' "$2")Z
		;;
	*) kc_stamp=$("$kc_bb" date -u +%Y-%m-%dT%H:%M:%SZ) ;;
	esac
}

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
			# shellcheck disable=SC2016 # $PATH is literal: the message runc gives
			printf '%s error: exec: "%s": executable file not found in $PATH\n' "$kc_marker" "$kc_a0" >&2
			exit 127
		fi
		;;
	esac
	# shellcheck disable=SC3038 # busybox ash's exec takes -a: argv[0] as given, as a runtime sets it
	exec -a "$kc_a0" "$kc_p" "$@"
}

# kc_env_file NAME PATH: export NAME with the bytes of PATH, a key of a Secret or ConfigMap the slot mounts
# read-only (the kubelet's key files are symlinks into its ..data folder); in the stage's subshell only, and
# the value is never printed. A missing key fails the stage, as the kubelet fails a container (exit 78).
kc_env_file() {
	if [ ! -f "$2" ]; then
		printf '%s error: env %s: %s is not mounted in this slot or has no such key\n' "$kc_marker" "$1" "$2" >&2
		exit 78
	fi
	kc_v=$("$kc_bb" cat -- "$2" && printf x) || exit 78
	export "$1=${kc_v%x}"
	kc_v=
}

# kc_env_dir DIR: kc_env_file for every key of the mounted Secret or ConfigMap DIR that is a variable name
# (envFrom skips the others); the runner's own names are never taken.
kc_env_dir() {
	if [ ! -d "$1" ]; then
		printf '%s error: env_from: %s is not mounted in this slot\n' "$kc_marker" "$1" >&2
		exit 78
	fi
	for kc_f in "$1"/*; do
		kc_k=${kc_f##*/}
		case $kc_k in
		'' | [0-9]* | *[!A-Za-z0-9_]* | KC_* | kc_* | CHAIN_SCRATCH | CHAIN_OUTPUT | CHAIN_GENERATION) continue ;;
		esac
		if [ -f "$kc_f" ]; then kc_env_file "$kc_k" "$kc_f"; fi
	done
}

# kc_file PATH: PATH is a regular file (not a FIFO, a device, a folder or a symlink): safe to read.
kc_file() {
	[ -f "$1" ] && [ ! -h "$1" ]
}

# kc_read PATH: kc_line is the first line of PATH if it is a regular file, else empty.
kc_read() {
	kc_line=
	if kc_file "$1"; then { read -r kc_line <"$1"; } 2>/dev/null; fi
}

# kc_number VALUE DEFAULT: kc_n is VALUE if it is a decimal number, else DEFAULT.
kc_number() {
	case $1 in '' | *[!0-9]*) kc_n=$2 ;; *) kc_n=$1 ;; esac
}

# kc_tokens: the run spec's tokens (wire.py `sealed_token`, `begin_token`). A sealed spec has a nonce: kc_t is
# 16 hex digits of the sha256 of "SEAL NONCE" (KC_SEAL: in no stage's env nor volume), kc_b (on the begin lines,
# printed before the stage starts) those of kc_t's. An unsealed spec (older operators) has kc_t on every line.
kc_seal=${KC_SEAL-}
kc_tokens() {
	kc_b=$kc_t
	[ -n "$kc_nonce" ] || return 0
	kc_t=$(printf '%s %s' "$kc_seal" "$kc_nonce" | "$kc_bb" sha256sum)
	kc_t=${kc_t%"${kc_t#????????????????}"}
	kc_b=$(printf '%s' "$kc_t" | "$kc_bb" sha256sum)
	kc_b=${kc_b%"${kc_b#????????????????}"}
}
kc_go=$kc_state/$kc_slot.go

# The capture (kc_capture_open): each stream's copy, at most kc_cap_max bytes (the file size limit of its tee,
# in 512-byte blocks): a stream past the bound is not captured, the log alone has it.
kc_cap_max=1048576

# kc_centi: kc_up is the time since boot in hundredths of a second (/proc/uptime, no process started).
kc_centi() {
	kc_up=0
	{ read -r kc_up _ </proc/uptime; } 2>/dev/null
	case $kc_up in *.[0-9][0-9]) kc_up=${kc_up%.*}${kc_up#*.} ;; *) kc_up=${kc_up%%.*}00 ;; esac
}

# kc_await SECONDS (`runner --go LENGTH SECONDS`, after its delivery, taken or not): wait for generation
# $kc_gen's end, at most SECONDS (1 to 60), and print what the task then takes instead of the slot's log
# (core/fastgo.py `Capture`): the start line, each stream's capture as one line of base64 after a header
# naming its length in bytes, the result line and an end line, all from the runner's records (written
# once its stage's processes were gone: exit_code last). A stage writes nothing but inside the base64, and
# knows no token (kc_tokens), so it can neither end a frame nor forge the result; a result line without the
# generation's token is not its end (a stage's planted records), the wait goes on. It starts no process
# while it waits (the runner spares such a wait, kc_scan). One line `... capture gen=G none` when there is
# none to give (a stream past its bound, the capture's tee killed, a runner before captures, the wait's end).
kc_await() {
	kc_number "$1" 0
	[ "$kc_n" -gt 0 ] || exit 0
	[ "$kc_n" -le 60 ] || kc_n=60
	kc_centi
	kc_until=$((kc_up + kc_n * 100))
	kc_none="$kc_marker capture gen=$kc_gen none"
	kc_t='' kc_nonce=''
	# shellcheck source=/dev/null # the run spec this exec was given (its own open file)
	. "$kc_spec"
	kc_tokens
	kc_w=$kc_state/.await.$$
	if ! "$kc_bb" mkfifo -m 600 "$kc_w" 2>/dev/null || ! { exec 3<>"$kc_w"; } 2>/dev/null; then
		"$kc_bb" rm -f "$kc_w" 2>/dev/null
		echo "$kc_none"
		exit 0
	fi
	"$kc_bb" rm -f "$kc_w"
	{ printf kc-await >/proc/self/comm; } 2>/dev/null # the runner's kc_waits: no process of its own from here
	kc_dir=$kc_state/gen-$kc_gen
	kc_cap=
	while :; do
		if kc_file "$kc_dir/exit_code" && kc_file "$kc_dir/capture"; then
			kc_read "$kc_dir/result"
			case $kc_line in "$kc_marker result gen=$kc_gen token=$kc_t "*)
				kc_res=$kc_line
				{ read -r kc_cap && read -r kc_begin; } <"$kc_dir/capture" 2>/dev/null
				break
				;;
			esac
		fi
		kc_centi
		if [ "$kc_up" -ge "$kc_until" ]; then
			echo "$kc_none"
			exit 0
		fi
		# shellcheck disable=SC3045,SC2162,SC2034 # busybox ash's read -t: a sleep (kc_x unused)
		read -t 0.02 kc_x <&3
	done
	case $kc_begin in "$kc_marker start gen=$kc_gen "*) ;; *) kc_cap= ;; esac
	if [ "$kc_cap" != ok ] || ! { exec 5<"$kc_dir/stdout" 6<"$kc_dir/stderr"; } 2>/dev/null; then
		echo "$kc_none"
		exit 0
	fi
	kc_sizes=
	for kc_k in 5 6; do
		kc_line=$("$kc_bb" wc -c <"/proc/self/fd/$kc_k") # self: a child may not open the undumpable $$'s
		kc_number "${kc_line##* }" x
		if [ "$kc_n" = x ] || [ "$kc_n" -gt "$kc_cap_max" ]; then
			echo "$kc_none"
			exit 0
		fi
		kc_sizes="$kc_sizes $kc_n"
	done
	printf '%s\n' "$kc_begin"
	for kc_k in 5:stdout 6:stderr; do
		kc_sizes=${kc_sizes# }
		printf '%s capture gen=%s stream=%s bytes=%s\n' "$kc_marker" "$kc_gen" "${kc_k#*:}" "${kc_sizes%% *}"
		kc_sizes=${kc_sizes#* }
		"$kc_bb" head -c "$kc_cap_max" <"/proc/self/fd/${kc_k%%:*}" | "$kc_bb" base64 -w 0 2>/dev/null ||
			"$kc_bb" head -c "$kc_cap_max" <"/proc/self/fd/${kc_k%%:*}" | "$kc_bb" base64 | "$kc_bb" tr -d '\n'
		echo
	done
	printf '%s\n%s capture gen=%s end\n' "$kc_res" "$kc_marker" "$kc_gen"
	exit 0
}

# `runner --go LENGTH`: the LENGTH bytes of run spec on stdin become $kc_go, renamed into place (never
# read half-written); then the runner is woken. Only the spec's form is checked: the runner decides. The spec
# is written to a file of this process's own name, held open: the runner empties its state when it starts or
# ends a generation, which may be while this runs (a duplicated exec, the annotation first), and may take the
# name mid-way; the rename then fails, and the file is written again under that name from the open one.
# Builtins but for head, wc and mv on the way (the go is on the path to the stage's start).
if [ "$1" = --go ]; then
	kc_number "$2" 0
	if [ "$kc_n" -lt 8 ] || [ "$kc_n" -gt 1048576 ]; then
		echo "$kc_marker error: runner --go LENGTH: a run spec of 8 to 1048576 bytes" >&2
		exit 64
	fi
	kc_tmp=$kc_go.$$
	# what it wrote, read anew through fd 4 by this shell or a child: /proc/self, each its own (a child may
	# not open /proc/$$/fd of this runner, which is not dumpable: proc_fd_access_allowed, ptrace_may_access)
	kc_spec=/proc/self/fd/4
	if [ -e "$kc_tmp" ] || [ -h "$kc_tmp" ]; then "$kc_bb" rm -rf "$kc_tmp" 2>/dev/null; fi
	if ! { command exec 4<>"$kc_tmp"; } 2>/dev/null; then
		echo "$kc_marker error: cannot write under $kc_state (is the runner up?)" >&2
		exit 74
	fi
	"$kc_bb" head -c "$kc_n" >&4 2>/dev/null
	kc_line=
	{ read -r kc_line <"$kc_spec"; } 2>/dev/null
	kc_number "${kc_line#kc_g=}" ""
	case $kc_line in kc_g=*) ;; *) kc_n= ;; esac
	if [ -z "$kc_n" ] || [ "$("$kc_bb" wc -c <"$kc_spec")" != "$2" ]; then
		"$kc_bb" rm -f "$kc_tmp"
		echo "$kc_marker error: not a run spec of $2 bytes" >&2
		exit 65
	fi
	kc_gen=$kc_n
	# a go into a slot prepared ahead names its prepare (kc_p): only the container created for it takes it
	# (KC_PREPARE, resolved by the kubelet from the pod whose image it started); the old container, not
	# killed yet, refuses it and the caller tries again (core/fastgo.py)
	kc_p=
	while read -r kc_line; do
		case $kc_line in kc_p=*) kc_p=${kc_line#kc_p=} && break ;; kc_stage_env*) break ;; esac
	done <"$kc_spec"
	if [ -n "$kc_p" ] && [ "$kc_p" != "${KC_PREPARE-}" ]; then
		"$kc_bb" rm -f "$kc_tmp"
		echo "$kc_marker error: generation $kc_gen is for the container prepared as $kc_p, not this one" >&2
		# the kubelet is about to kill this container for that one, which ends this exec too: the caller
		# then execs into the new one (one try per container, not one every few milliseconds)
		"$kc_bb" sleep 3
		exit 76
	fi
	# the runner of THIS container serves the slot (kc_serves): it removed at its start whatever fast go an
	# earlier container left, so the spec put now stays for it. A go may come as soon as the pod's status
	# shows the container running (a slot prepared ahead: core/status.py `_prepared_state`), before that.
	kc_i=0
	until kc_serves; do
		kc_i=$((kc_i + 1))
		if [ "$kc_i" -gt 250 ]; then
			"$kc_bb" rm -f "$kc_tmp"
			echo "$kc_marker error: the runner of $kc_slot does not serve it yet: the annotation delivers" >&2
			exit 75
		fi
		"$kc_bb" sleep 0.02
	done
	kc_read "$kc_hwmfile"
	kc_number "$kc_line" 0
	if [ "$kc_gen" -le "$kc_n" ]; then # the annotation was first: nothing to deliver
		"$kc_bb" rm -f "$kc_tmp"
		echo "$kc_marker generation $kc_gen already started in $kc_slot: not taken"
		[ -z "${3-}" ] || kc_await "$3"
		exit 0
	fi
	kc_i=0
	until "$kc_bb" mv -f "$kc_tmp" "$kc_go" 2>/dev/null; do # the file as written, else its copy again
		kc_i=$((kc_i + 1))
		if [ "$kc_i" -ge 5 ]; then
			"$kc_bb" rm -f "$kc_tmp"
			echo "$kc_marker error: cannot put the run spec in $kc_go" >&2
			exit 74
		fi
		"$kc_bb" cat "$kc_spec" >"$kc_tmp" 2>/dev/null
	done
	# pid 1's argv as busybox ash's read gives it (it drops the NULs that end each argument): a runner is
	# `busybox sh RUNNER`, the kernel's run of the script's `#!` line
	kc_cmd=
	{ read -r kc_cmd </proc/1/cmdline; } 2>/dev/null
	case $kc_cmd in *"sh$0") kill -USR1 1 2>/dev/null ;; esac
	[ -z "${3-}" ] || kc_await "$3"
	exit 0
fi

# The newest run spec: the one in env at container start, the volume's file or the fast go's once newer. A
# spec defines kc_g (generation), kc_t (token), kc_s (stage), kc_m (outputs limit), kc_stage_env,
# kc_stage_argv.
kc_g=0
kc_t=
kc_b='' kc_nonce=''
kc_p=
kc_named=
kc_prep=${KC_PREPARE-}
kc_s=
kc_m=16384
kc_r=0
kc_skip=0
kc_taken=$kc_go.taken
# kc_mine: a spec that names a prepare (kc_p) is this runner's only if its container was created for that
# prepare; any other is left alone (kc_skip), never run nor recorded: the old container of a slot prepared
# ahead (the kubelet has not killed it yet), or one restarted on the old image before the kubelet saw the
# prepare, while the go already names the new container.
kc_mine() {
	kc_named=$kc_p # (kc_p is a loop variable elsewhere) the spec names a prepare: its output is captured
	[ -z "$kc_p" ] || [ "$kc_p" = "$kc_prep" ] || kc_skip=$kc_g
}
if [ -n "$KC_RUN" ]; then eval "$KC_RUN"; kc_tokens; kc_mine; fi
# A spec read from the volume with kc_r=1 came with an image patch: this container is about to be stopped
# for the new image, whose runner gets the spec in env. It is left alone (kc_skip).
# The fast go's file is taken by a rename (a later exec puts a new one) and read once. It only starts: it is
# used only for a generation newer than any this slot started ($kc_hwmfile), so a late exec into a runner
# restarted with an emptied run spec (nothing in memory) neither records an older generation as lost (which
# emptied the records) nor starts one again; results of started generations are the annotation's to ask.
kc_poll() {
	kc_line=
	{ read -r kc_line <"$kc_meta"; } 2>/dev/null # the kubelet's file: a symlink into its ..data
	kc_number "${kc_line#kc_g=}" 0
	kc_f=$kc_n
	kc_from=$kc_meta
	if [ -e "$kc_go" ] || [ -h "$kc_go" ]; then
		"$kc_bb" mv -f "$kc_go" "$kc_taken" 2>/dev/null
		kc_read "$kc_taken"
		case $kc_line in kc_g=*) kc_number "${kc_line#kc_g=}" 0 ;; *) kc_n=0 ;; esac
		kc_fast=$kc_n
		kc_read "$kc_hwmfile"
		kc_number "$kc_line" 0
		if [ "$kc_fast" -gt "$kc_f" ] && [ "$kc_fast" -gt "$kc_n" ]; then
			kc_f=$kc_fast
			kc_from=$kc_taken
		fi
	fi
	if [ "$kc_f" -gt "$kc_g" ]; then
		kc_r=0
		kc_t='' kc_nonce='' kc_p=''
		# shellcheck source=/dev/null # the run spec (kc_g=... assignments, core/wire.py), read as shell
		. "$kc_from"
		kc_tokens
		[ "$kc_r" = 1 ] && kc_skip=$kc_g
		kc_mine
	fi
	# a generation about to run empties the state (kc_run): the taken file goes with it, off the go's path
	[ "$kc_g" -gt "$kc_done" ] && [ "$kc_g" != "$kc_skip" ] && return
	if [ -e "$kc_taken" ] || [ -h "$kc_taken" ]; then "$kc_bb" rm -rf "$kc_taken" 2>/dev/null; fi
}

# kc_alive PID: PID is a live child of the runner (not a zombie).
kc_alive() {
	kc_st=
	{ read -r kc_st <"/proc/$1/stat"; } 2>/dev/null || return 1
	# shellcheck disable=SC2086 # split on purpose: /proc/PID/stat's fields after comm (no glob chars)
	set -- ${kc_st##*) }
	[ "$1" != Z ] && [ "$2" = "$$" ]
}

# kc_others: whether a process other than the runner is left (zombies do not count: they run nothing).
kc_others() {
	for kc_p in /proc/[0-9]*; do
		[ "$kc_p" = "/proc/$$" ] && continue
		kc_st=
		{ read -r kc_st <"$kc_p/stat"; } 2>/dev/null || continue
		# shellcheck disable=SC2086 # split on purpose: /proc/PID/stat's fields after comm (no glob chars)
		set -- ${kc_st##*) }
		[ "$1" = Z ] || return 0
	done
	return 1
}

# kc_descendants: kc_pids is the runner's descendants, found by their parent pids (when it is not pid 1).
kc_descendants() {
	kc_tree=" $$ "
	kc_pids=
	kc_more=1
	while [ "$kc_more" = 1 ]; do
		kc_more=0
		for kc_p in /proc/[0-9]*; do
			kc_st=
			{ read -r kc_st <"$kc_p/stat"; } 2>/dev/null || continue
			# shellcheck disable=SC2086 # split on purpose: /proc/PID/stat's fields after comm (no glob chars)
			set -- ${kc_st##*) }
			kc_p=${kc_p#/proc/}
			case $kc_tree in *" $kc_p "*) continue ;; esac
			case $kc_tree in *" $2 "*)
				kc_tree="$kc_tree$kc_p "
				kc_pids="$kc_pids $kc_p"
				kc_more=1
				;;
			esac
		done
	done
}

# kc_scan (as pid 1): kc_pids is every live process of the slot but the runner and those the kubelet exec'd
# into the container (a fast go, a probe, `kubectl exec`) with theirs, which kc_execd lists. An exec'd
# process has its parent outside the container's pid namespace (the runtime's: /proc shows ppid 0); no
# stage process can: its parents are all in the namespace, and its orphans go to pid 1.
kc_scan() {
	kc_all=
	for kc_p in /proc/[0-9]*; do
		kc_st=
		{ read -r kc_st <"$kc_p/stat"; } 2>/dev/null || continue
		# shellcheck disable=SC2086 # split on purpose: /proc/PID/stat's fields after comm (no glob chars)
		set -- ${kc_st##*) }
		kc_p=${kc_p#/proc/}
		[ "$1" = Z ] || [ "$kc_p" = "$$" ] || kc_all="$kc_all $kc_p:$2"
	done
	kc_execd=" "
	kc_more=1
	while [ "$kc_more" = 1 ]; do
		kc_more=0
		for kc_e in $kc_all; do
			case $kc_execd in *" ${kc_e%%:*} "*) continue ;; esac
			case " 0$kc_execd" in *" ${kc_e#*:} "*)
				kc_execd="$kc_execd${kc_e%%:*} "
				kc_more=1
				;;
			esac
		done
	done
	kc_pids=
	kc_busy=
	for kc_e in $kc_all; do
		kc_p=${kc_e%%:*}
		case $kc_execd in
		*" $kc_p "*) kc_waits "$kc_e" || kc_busy="$kc_busy $kc_p" ;;
		*) kc_keeps "$kc_p" || kc_pids="$kc_pids $kc_p" ;;
		esac
	done
}

# kc_waits PID:PPID (exec'd): a fast go waiting for its generation's end (kc_await names itself kc-await
# once its go is delivered, and starts no process while it waits), exec'd by the kubelet (its parent is
# outside the container: no stage process can be one) and bounded by its own wait. The runner does not wait
# for it to end: it waits for the result the runner is about to record.
kc_waits() {
	[ "${1#*:}" = 0 ] || return 1
	case "$kc_all " in *":${1%%:*} "*) return 1 ;; esac
	kc_st=
	{ read -r kc_st <"/proc/${1%%:*}/stat"; } 2>/dev/null
	case $kc_st in "${1%%:*} (kc-await) "*) return 0 ;; esac
	return 1
}

# kc_keeps PID: PID is a tee of the stage's capture (kc_capture_open): the runner's, ended by kc_capture_close
# once the stage's processes are gone (they hold its pipe), never killed with them.
kc_keeps() {
	case " $kc_tees " in *" $1 "*) return 0 ;; esac
	return 1
}

# kc_end_all: end every process of the slot but the runner, and wait until they are gone. As pid 1 of the
# container's pid namespace it reaches them all (forks racing the kill included: tried again while any is
# left). What the kubelet exec'd into the container is not the stage's: it gets about 2 s to end on its own
# (a late fast go ends in milliseconds, saying its generation was not taken), then `kill -KILL -1` (kill(2):
# every process but the caller's namespace's init) ends it too.
kc_end_all() {
	kc_i=0
	while [ "$kc_i" -lt 500 ]; do
		if [ "$$" != 1 ]; then
			kc_descendants
			kc_k=
			for kc_p in $kc_pids; do kc_keeps "$kc_p" || kc_k="$kc_k $kc_p"; done
			kc_pids=$kc_k
			[ -n "$kc_pids" ] || return 0
			# shellcheck disable=SC2086 # split on purpose: a list of pids
			kill -KILL $kc_pids 2>/dev/null
		elif [ "$kc_i" -ge 200 ]; then
			kill -KILL -1 2>/dev/null
			kc_others || return 0
		else
			kc_scan
			[ -n "$kc_pids" ] || [ -n "$kc_busy" ] || return 0
			# shellcheck disable=SC2086 # split on purpose: a list of pids
			[ -z "$kc_pids" ] || kill -KILL $kc_pids 2>/dev/null
		fi
		kc_i=$((kc_i + 1))
		# shellcheck disable=SC3045,SC2162,SC2034 # busybox ash's read -t: a sleep a signal cuts short (kc_x unused)
		read -t 0.01 kc_x <&3 # the kernel tears them down; SIGCHLD wakes the runner, which reaps them
	done
	echo "$kc_marker error: processes of generation $kc_g are still there after $kc_i kills" >&2
}

# kc_reclaim: give the slot's state back to the runner. A stage has the runner's user and capabilities: as
# root (an image's default user) without DAC_OVERRIDE but with CHOWN and FOWNER, it can give the state folder
# and whatever is in it to another user and take every mode off, which locks the runner out of them too. The
# runner undoes it with the same rights: each file back to its user (CHOWN), then readable, writable and
# searchable (a+rwX: whoever owns it, with FOWNER or as its owner). A non-root runner does what its user may:
# its stages could change nothing else.
kc_reclaim() {
	"$kc_bb" chown -R "$kc_ids" "${1:-$kc_state}" 2>/dev/null
	"$kc_bb" chmod -R a+rwX "${1:-$kc_state}" 2>/dev/null
}

# kc_empty DIR [RECLAIMED]: remove everything in DIR, reclaimed first (kc_reclaim DIR), but for a first round
# with RECLAIMED (no stage process was left since DIR was last reclaimed: its removal needs none, and what
# still stays is reclaimed in the rounds after). Without FOWNER (CHOWN kept) each round reclaims one more level
# of folders a stage gave away; kc_left lists what is still there after 64.
kc_empty() {
	kc_i=0
	while :; do
		if [ "$kc_i" != 0 ] || [ -z "${2-}" ]; then kc_reclaim "$1"; fi
		"$kc_bb" rm -rf "$1"/* "$1"/.[!.]* "$1"/..?* 2>/dev/null
		kc_left=
		for kc_p in "$1"/* "$1"/.[!.]* "$1"/..?*; do
			if [ -e "$kc_p" ] || [ -h "$kc_p" ]; then kc_left="$kc_left ${kc_p##*/}"; fi
		done
		[ -n "$kc_left" ] || return 0
		kc_i=$((kc_i + 1))
		[ "$kc_i" -lt 64 ] || return 1
	done
}

# kc_wipe: empty the slot's state (kc_empty STATE RECLAIMED: the runner reclaimed it once the last stage's
# processes were gone, kc_finish, or at its start), but for the startup probe's record, made again
# (kc_serve). Whatever is still left is reported and never obeyed.
kc_wipe() {
	if ! kc_empty "$kc_state" reclaimed; then
		echo "$kc_marker error: cannot remove what generation $kc_g left in $kc_state:$kc_left" >&2
		kc_serve
		return 1
	fi
	kc_serve
}

# kc_clean: empty the slot's temporary folders ($KC_TMP) and make the stages' HOME in the first afresh, empty
# (mode 0700). False, said on stderr, when something stays.
kc_clean() {
	kc_unclean=
	for kc_d in $kc_tmp; do
		kc_empty "$kc_d" || kc_unclean="$kc_unclean $kc_d:$kc_left"
	done
	if [ -z "$kc_unclean" ] && [ -n "$kc_home" ]; then
		"$kc_bb" mkdir -m 700 "$kc_home" 2>/dev/null || kc_unclean=" $kc_home"
	fi
	[ -z "$kc_unclean" ] && return 0
	echo "$kc_marker error: cannot empty the slot's temporary folders:$kc_unclean" >&2
	return 1
}

# kc_pristine: the temporary folders hold nothing but the empty HOME that kc_clean made (builtins only: the
# check before each stage starts no process).
kc_pristine() {
	for kc_d in $kc_tmp; do
		for kc_p in "$kc_d"/* "$kc_d"/.[!.]* "$kc_d"/..?*; do
			if [ "$kc_p" = "$kc_home" ] && [ -d "$kc_p" ] && [ ! -h "$kc_p" ]; then
				for kc_q in "$kc_p"/* "$kc_p"/.[!.]* "$kc_p"/..?*; do
					if [ -e "$kc_q" ] || [ -h "$kc_q" ]; then return 1; fi
				done
			elif [ -e "$kc_p" ] || [ -h "$kc_p" ]; then
				return 1
			fi
		done
	done
	[ -z "$kc_home" ] || [ -d "$kc_home" ]
}

# kc_devices: kc_devs is what /dev holds (each entry's inode, type and mode, owner, device numbers and link
# target), the termination log (which the runner writes) left out. /dev is the runtime's tmpfs, writable by
# root whatever the root filesystem: a stage that changed it leaves its container to be started afresh.
kc_devices() {
	set --
	for kc_p in /dev/* /dev/.[!.]* /dev/..?*; do
		if [ "$kc_p" != "$kc_term" ] && { [ -e "$kc_p" ] || [ -h "$kc_p" ]; }; then set -- "$@" "$kc_p"; fi
	done
	kc_devs=$("$kc_bb" stat -c '%i %f %u %g %t:%T %N' "$@" 2>&1)
}

# kc_serve: the record that the runner serves the slot (the startup probe's and the fast go's, kc_serves),
# naming it (kc_me: its pid and start time), made unless something is there (a stage's leftover the wipe
# could not remove: never opened, a FIFO would block).
kc_serve() {
	[ -e "$kc_serving" ] || [ -h "$kc_serving" ] || { printf '%s\n' "$kc_me" >"$kc_serving"; } 2>/dev/null
}

# kc_pipes: the next generation's two pipes, made while no stage runs (off the path to its start): FIFOs made
# in the state, opened read-write as fds 5 and 6 (no open waits for the other end) and unlinked at once (no
# path leads to them). kc_piped says they are there.
kc_piped=
kc_pipes() {
	[ -z "$kc_piped" ] || return 0 # the last generation did not use them
	kc_cf=$kc_state/.pipe.$$
	if "$kc_bb" mkfifo -m 600 "$kc_cf.1" "$kc_cf.2" 2>/dev/null &&
		{ exec 5<>"$kc_cf.1" 6<>"$kc_cf.2"; } 2>/dev/null; then
		kc_piped=1
	fi
	"$kc_bb" rm -f "$kc_cf.1" "$kc_cf.2" 2>/dev/null
}

# kc_capture_open: for a go into a slot prepared ahead (its spec names the prepare, kc_named: the only go whose
# task may not read the slot's log yet), the stage's stdout and stderr become the two pipes of kc_pipes (a
# pipe, as a runtime's shim gives), each read by a `tee` of the runner's busybox that copies every byte to
# the container's stream and the first kc_cap_max into gen-G/stdout or gen-G/stderr (its file size limit:
# past it the write fails, the tee carries on with the container's stream and exits 1: not captured).
# Builtins only (the pipes are opened anew through the runner's own /proc/self/fd): fds 7 and 8 are the
# stage's write ends, 4 and 9 the tees' read ends. Any other generation (or without pipes): 7 and 8 are the
# container's streams, as the stage had them before captures, and nothing is captured (kc_tees empty).
# kc_capture_opened closes the runner's ends once the stage has its own.
kc_capture_open() {
	kc_tees=
	# shellcheck disable=SC2094 # each pipe's write and read end, opened anew from the runner's held ends
	if [ -n "$kc_named" ] && [ -n "$kc_piped" ] &&
		{ exec 7>/proc/self/fd/5 8>/proc/self/fd/6 4</proc/self/fd/5 9</proc/self/fd/6; } 2>/dev/null; then
		: >"$kc_dir/stdout"
		: >"$kc_dir/stderr"
		# shellcheck disable=SC3045 # busybox ash's ulimit -f (512-byte blocks)
		(
			trap '' XFSZ
			ulimit -f $((kc_cap_max / 512))
			unset KC_SEAL KC_RUN KC_PREPARE # the runner's own: not in a process a stage can signal
			exec "$kc_bb" tee "$kc_dir/stdout"
		) <&4 2>/dev/null 3>&- 4<&- 5<&- 6<&- 7>&- 8>&- 9<&- &
		kc_tees=$!
		# shellcheck disable=SC3045 # as above
		(
			trap '' XFSZ
			ulimit -f $((kc_cap_max / 512))
			unset KC_SEAL KC_RUN KC_PREPARE
			exec "$kc_bb" tee "$kc_dir/stderr"
		) <&9 >&2 2>/dev/null 3>&- 4<&- 5<&- 6<&- 7>&- 8>&- 9<&- &
		kc_tees="$kc_tees $!"
	else
		exec 7>&1 8>&2 4</dev/null 9</dev/null
	fi
}
kc_capture_opened() {
	exec 4<&- 7>&- 8>&- 9<&-
	[ -n "$kc_tees" ] || return 0
	exec 5<&- 6<&-
	kc_piped=
}

# kc_capture_close (once the stage's processes are gone, which held the pipes): wait for the tees to drain
# (at most about 2 s: a stage may have stopped one); kc_cap is 1 if both streams were captured whole (fds 7
# and 8 then hold the copies, which kc_capture_keep writes into the generation's records once the state is
# emptied), else empty.
kc_capture_close() {
	kc_cap=
	[ -n "$kc_tees" ] || return 0
	kc_cap=1
	kc_i=0
	for kc_p in $kc_tees; do
		while kc_alive "$kc_p"; do
			kc_i=$((kc_i + 1))
			if [ "$kc_i" -gt 200 ]; then
				kill -KILL "$kc_p" 2>/dev/null
				kc_cap=
			fi
			# shellcheck disable=SC3045,SC2162,SC2034 # busybox ash's read -t: a sleep SIGCHLD cuts short
			read -t 0.01 kc_x <&3
		done
		wait "$kc_p" || kc_cap=
	done
	kc_tees=
	if [ -z "$kc_cap" ] || ! kc_file "$kc_dir/stdout" || ! kc_file "$kc_dir/stderr" ||
		! { exec 7<"$kc_dir/stdout" 8<"$kc_dir/stderr"; } 2>/dev/null; then
		kc_cap=
	fi
}

# kc_capture_keep (after the result is announced: off the path to it): the capture's copies as the
# generation's records, at most one byte over the bound each (a stage could have written the files itself:
# `runner --go` gives none past it), then gen-G/capture (`ok`, the start line after it). A generation
# without a whole capture has gen-G/capture `none`, written before its exit_code.
kc_capture_keep() {
	[ -n "$kc_cap" ] || return 0
	if "$kc_bb" head -c $((kc_cap_max + 1)) <&7 >"$kc_dir/stdout" &&
		"$kc_bb" head -c $((kc_cap_max + 1)) <&8 >"$kc_dir/stderr"; then
		printf 'ok\n%s\n' "$kc_start" >"$kc_dir/capture"
	else
		printf 'none\n' >"$kc_dir/capture"
	fi
	exec 7<&- 8<&-
	kc_cap=
}

# kc_finish EXIT_CODE REASON: the stage's processes are ended (its capture drained), then the state is
# emptied and the generation's records written afresh (the capture too; exit_code last: the generation is
# done), then the result announced.
kc_finish() {
	kc_phase=recording
	kc_now
	kc_end_all
	kc_capture_close
	kc_reclaim
	kc_out=$kc_dir/outputs.json
	kc_enc=-
	kc_number "$kc_m" 16384
	kc_m=$kc_n
	[ "$kc_m" -le 16384 ] || kc_m=16384
	kc_os=absent
	if kc_file "$kc_out" && [ -s "$kc_out" ]; then
		# one byte over the limit, encoded on one line: its size is the encoding's (3 bytes in 4 characters)
		kc_enc=$("$kc_bb" head -c "$((kc_m + 1))" "$kc_out" | "$kc_bb" base64 -w 0) ||
			kc_enc=$("$kc_bb" head -c "$((kc_m + 1))" "$kc_out" | "$kc_bb" base64 | "$kc_bb" tr -d '\n')
		kc_size=$((${#kc_enc} * 3 / 4))
		case $kc_enc in *==) kc_size=$((kc_size - 2)) ;; *=) kc_size=$((kc_size - 1)) ;; esac
		if [ "$kc_size" -gt "$kc_m" ]; then
			kc_enc=-
			kc_os=too-big
		else
			kc_os=ok
		fi
	fi
	[ -n "$kc_started" ] || kc_started=$kc_stamp
	kc_wipe
	if ! "$kc_bb" mkdir "$kc_dir"; then
		echo "$kc_marker error: cannot create $kc_dir" >&2
		exit 70
	fi
	printf '%s\n' "$kc_g" >"$kc_hwmfile"
	printf '%s\n' "$kc_started" >"$kc_dir/started"
	[ -n "$kc_cap" ] || printf 'none\n' >"$kc_dir/capture"
	printf '%s result gen=%s token=%s stage=%s slot=%s exit=%s reason=%s started=%s finished=%s outputs=%s outputs_status=%s streams=2\n' \
		"$kc_marker" "$kc_g" "$kc_t" "$kc_s" "$kc_slot" "$1" "$2" "$kc_started" "$kc_stamp" "$kc_enc" \
		"$kc_os" >"$kc_dir/result"
	printf '%s\n' "$1" >"$kc_dir/exit_code"
	kc_announce
	# the stage's processes are gone: what it left in /dev and the temporary folders, seen to after the
	# announcement (off the next stage's path: it runs in the other slot, or after this in this one)
	kc_devices
	kc_capture_keep
	[ "$kc_devs" = "$kc_devs0" ] || kc_renew="generation $kc_g changed /dev"
	kc_clean
	kc_pipes
}

# Announce the result: the termination message (the kubelet keeps at most 4096 bytes: large outputs are
# left to the log line), the result line on stdout and the end of stderr, each on a line of its own (the
# stage may have left one unended).
kc_announce() {
	kc_read "$kc_dir/result"
	kc_res=$kc_line
	kc_msg=$kc_res
	if [ "${#kc_res}" -gt 4000 ]; then kc_msg="${kc_res%% outputs=*} outputs=- outputs_status=truncated"; fi
	kc_terminate
	printf '\n%s\n' "$kc_res"
	printf '\n%s stderr-end gen=%s token=%s stage=%s\n' "$kc_marker" "$kc_g" "$kc_t" "$kc_s" >&2
	{ read -r kc_replayed <"$kc_replayfile"; } 2>/dev/null # a request made meanwhile is answered
}

# kc_replay (parked): a replay request ("GENERATION NONCE", the replay annotation) for the generation the
# runner parked on, made since it last announced that result: the result is announced again from its records
# (its line was rotated out of the slot's log). Any other request is dropped; the stage never runs again.
kc_replayed=
kc_replay() {
	kc_line=
	{ read -r kc_line <"$kc_replayfile"; } 2>/dev/null # the kubelet's file (a symlink into ..data), read-only
	[ -n "$kc_line" ] && [ "$kc_line" != "$kc_replayed" ] || return 0
	kc_replayed=$kc_line
	[ "${kc_line%% *}" = "$kc_g" ] && [ "$kc_g" = "$kc_done" ] || return 0
	kc_dir=$kc_state/gen-$kc_g
	if kc_file "$kc_dir/exit_code"; then kc_announce; fi
}

# kc_terminate: $kc_msg becomes the termination message. The kubelet's file (kuberuntime_container.go
# makeMounts: created mode 0666, the container's user may write it) can be given away or made mode 000 by a
# root stage, as the state (kc_reclaim): its owner and mode are restored. A termination log that is neither a
# regular file nor absent (a FIFO would block) or stays unwritable is left, and the loss said.
kc_terminate() {
	if [ ! -e "$kc_term" ] || kc_file "$kc_term"; then
		{ printf '%s' "$kc_msg" >"$kc_term"; } 2>/dev/null && return
		"$kc_bb" chown "$kc_ids" "$kc_term" 2>/dev/null
		"$kc_bb" chmod 0666 "$kc_term" 2>/dev/null
		{ printf '%s' "$kc_msg" >"$kc_term"; } 2>/dev/null && return
	fi
	echo "$kc_marker error: cannot write the termination message $kc_term: generation $kc_g's result is in this log and the slot's records only" >&2
}

# kc_stop_requested: the stop annotation names this generation; kc_grace is its grace period.
kc_stop_requested() {
	kc_line=
	{ read -r kc_line <"$kc_stopfile"; } 2>/dev/null # the kubelet's file (a symlink into ..data), read-only
	[ "${kc_line%% *}" = "$kc_g" ] || return 1
	kc_number "${kc_line#* }" 30
	kc_grace=$kc_n
}

# kc_uptime: kc_up is the seconds since boot (whole), from the kernel, without starting a process.
kc_uptime() {
	kc_centi
	kc_up=$((kc_up / 100))
}

# kc_wait_stage: wait for the stage's process (SIGCHLD wakes the wait), following a stop request meanwhile;
# kc_code is its exit status, kc_stopped 1 if a stop request ended it.
kc_wait_stage() {
	kc_stopped=0
	kc_kill_at=
	while kc_alive "$kc_child"; do
		if [ "$kc_stopped" = 0 ] && kc_stop_requested; then
			kc_stopped=1
			kill -TERM "$kc_child" 2>/dev/null
			kc_uptime
			kc_kill_at=$((kc_up + kc_grace))
			echo "$kc_marker stopping generation $kc_g (stage $kc_s) as asked, SIGKILL in ${kc_grace}s" >&2
		elif [ -n "$kc_kill_at" ]; then
			kc_uptime
			if [ "$kc_up" -ge "$kc_kill_at" ]; then kill -KILL "$kc_child" 2>/dev/null; fi
		fi
		# shellcheck disable=SC3045,SC2162,SC2034 # busybox ash's read -t: a sleep a signal cuts short (kc_x unused)
		read -t 0.1 kc_x <&3
	done
	kc_code=0
	# no trap on SIGCHLD for this wait: ash's wait returns 128 + a trapped signal that comes while it reaps,
	# and a capture's tee ending with the stage is one (its status then read 145, not the stage's)
	trap - CHLD
	wait "$kc_child"
	kc_code=$?
	trap : CHLD
}

kc_run() {
	kc_dir=$kc_state/gen-$kc_g
	kc_started=
	if kc_file "$kc_dir/exit_code"; then
		# the runner's own record, not one its stage planted before its container went (it knows no token)
		kc_read "$kc_dir/result"
		case $kc_line in "$kc_marker result gen=$kc_g token=$kc_t "*)
			kc_announce
			return
			;;
		esac
	fi
	if kc_file "$kc_dir/started"; then
		kc_read "$kc_dir/started"
		kc_started=$kc_line
		case $kc_started in '' | *[!0-9TZ:.-]*) kc_started= ;; esac
		kc_finish 137 interrupted
		return
	fi
	kc_read "$kc_hwmfile"
	kc_number "$kc_line" 0
	if [ "$kc_g" -le "$kc_n" ]; then
		# started before in this slot, and its records are gone: never run it again
		echo "$kc_marker error: the records of generation $kc_g are gone; not running it again" >&2
		kc_finish 70 lost-record
		return
	fi
	if ! kc_pristine && ! kc_clean; then
		# never run a stage over what another left: recorded as failed, never run again
		kc_finish 70 unclean
		return
	fi
	kc_wipe
	if ! "$kc_bb" mkdir "$kc_dir"; then
		echo "$kc_marker error: cannot create $kc_dir" >&2
		exit 70
	fi
	printf '%s\n' "$kc_g" >"$kc_hwmfile"
	kc_now
	kc_started=$kc_stamp
	printf '%s\n' "$kc_started" >"$kc_dir/started"
	kc_msg= # the termination message holds the slot's previous result line: no stage's to read
	kc_terminate
	kc_phase=stage
	kc_start="$kc_marker start gen=$kc_g token=$kc_b stage=$kc_s slot=$kc_slot at=$kc_stamp"
	printf '%s\n' "$kc_start"
	printf '%s stderr-start gen=%s token=%s stage=%s\n' "$kc_marker" "$kc_g" "$kc_b" "$kc_s" >&2
	kc_capture_open
	(
		trap - CHLD
		eval "$kc_envsh"
		[ -z "$kc_home" ] || export HOME="$kc_home"
		kc_stage_env
		CHAIN_SCRATCH=$kc_scratch CHAIN_OUTPUT=$kc_dir/outputs.json CHAIN_GENERATION=$kc_g
		export CHAIN_SCRATCH CHAIN_OUTPUT CHAIN_GENERATION
		kc_stage_argv
	) >&7 2>&8 3>&- 4<&- 5<&- 6<&- 7>&- 8>&- 9<&- & # the stage gets only its streams (the wait FIFO is the runner's)
	kc_child=$!
	kc_capture_opened
	if [ "$kc_signals" -gt 0 ]; then kill -TERM "$kc_child" 2>/dev/null; fi # stopped before the fork
	kc_wait_stage
	kc_reason=completed
	[ "$kc_stopped" = 1 ] && kc_reason=stopped
	[ "$kc_signals" -gt 0 ] && kc_reason=terminated
	kc_finish "$kc_code" "$kc_reason"
}

# Start-up: the captured env (in memory only), the private wait FIFO (made in the state, opened, unlinked).
# Not /proc/$$/environ: the runner is not dumpable (its busybox is execute-only), so the kernel makes its
# /proc files root's and unreadable to it; busybox env, run by it, prints the env it inherited, NUL-ended.
kc_envsh=$("$kc_bb" env -0 | "$kc_bb" xargs -0 "$kc_bb" sh "$0" --capture-env) || kc_envsh=
kc_envsh="unset SHLVL PWD OLDPWD PATH
$kc_envsh"
kc_ids=$("$kc_bb" id -u):$("$kc_bb" id -g)
kc_birth "$$"
kc_me=$kc_born
kc_fifo=$kc_state/.wait.$$
"$kc_bb" mkdir -p "$kc_state" 2>/dev/null
kc_reclaim # a stage may have locked the state before this container restarted
kc_devices
kc_devs0=$kc_devs
kc_clean # what a stage of an earlier container of this slot left in the temporary folders (they outlive it)
"$kc_bb" rm -rf "$kc_fifo" 2>/dev/null
if ! "$kc_bb" mkdir -p "$kc_state" || ! "$kc_bb" mkfifo -m 600 "$kc_fifo" || ! exec 3<>"$kc_fifo"; then
	echo "$kc_marker error: cannot write the runner's state under $kc_state" >&2
	exit 70
fi
"$kc_bb" rm -f "$kc_fifo"
"$kc_bb" rm -rf "$kc_go" "$kc_taken" 2>/dev/null # a stage's of an earlier container, or one too late: the annotation decides
# The startup probe's record, made afresh (whatever a stage left there, a FIFO included): the runner serves the
# slot. The kubelet counts the slot Ready from then on, parked or running a stage (there is no readiness probe).
"$kc_bb" rm -rf "$kc_serving" 2>/dev/null
kc_serve
kc_pipes

# Fast polls left (KC_HOT_POLLS, 250 by default, sets how many follow a start or a generation's end).
kc_number "${KC_HOT_POLLS:-250}" 250
kc_hot_polls=$kc_n
kc_hot=$kc_hot_polls
kc_done=0
while :; do
	kc_poll
	if [ "$kc_g" -gt "$kc_done" ] && [ "$kc_g" != "$kc_skip" ]; then
		kc_run
		kc_phase=idle
		# stopped while it recorded (an interrupted or lost generation's too): leave now, not at the kill
		[ "$kc_signals" -gt 0 ] && exit 0
		if [ -n "$kc_renew" ]; then # the kubelet starts the container afresh (restartPolicy Always)
			echo "$kc_marker $kc_renew: the container of $kc_slot ends, to start afresh" >&2
			exit 0
		fi
		kc_done=$kc_g
		kc_hot=$kc_hot_polls
		continue
	fi
	kc_replay
	kc_phase=parked
	kc_wait=0.1
	if [ "$kc_hot" -gt 0 ]; then
		kc_wait=0.02
		kc_hot=$((kc_hot - 1))
	fi
	# shellcheck disable=SC3045,SC2162,SC2034 # busybox ash's read -t: a sleep a signal cuts short (kc_x unused)
	read -t "$kc_wait" kc_x <&3
	kc_phase=idle
done
