#!/usr/bin/env bash
# bench/selftest.sh — the bench drivers check themselves (about 5 s).
#
#   1. loadgen --selftest: histogram percentiles, the zipf sampler, mix weights.
#   2. loadgen --check-commandstats against a fresh redis-server: a short run
#      of every op type (and then of each JuiceFS preset) whose own count of
#      commands sent, per command, must equal the growth of Redis's INFO
#      commandstats calls (commands queued in a MULTI count when EXEC ran
#      them; the lookup script's HGET and GET count too). A driver that
#      sends something else than it reports fails here.
#   3. batchunlink on the same redis-server: populate, unlink, verify-empty;
#      writes, verify-full (small directory); then on Redis's unix socket
#      (-s) an unlink with --fused-watch, which must take 4 round trips a
#      batch where the plain unlink takes 7 (and, with BATCHUNLINK_CPU=1,
#      prints its CPU time), verified over TCP.
#      --pair-port: the unlink on two redis-servers in turn (turns of one
#      batch, and of three), each verified.
#   4. paired (lib.sh), the per-repetition ratios of batch_unlink.sh, on
#      numbers whose answer is known.
#   5. relay (batch_unlink.sh RELAY=1) in front of it: batchunlink's unlink
#      and writes through the relay, verified on Redis; a 4 MB value set and
#      read back through it (more than its buffer and the sockets' hold).
#   6. PIN=1 (lib.sh pin_hosts), with two cores or more: what it starts on
#      Redis's side and the script itself get disjoint, non-empty sets of
#      cores (checked in a subshell: the rest of the selftest is not pinned).
#
# Exits non-zero on the first failure. Environment: REDIS_SERVER, LOADGEN_BIN,
# BATCHUNLINK_BIN, SELFTEST_OPS (ops per check run, 5000).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_init selftest

SELFTEST_OPS=${SELFTEST_OPS:-5000}
find_redis
build_loadgen
build_batchunlink

log "loadgen --selftest"
"$LOADGEN_BIN" --selftest >"$work/selftest.out" || { cat "$work/selftest.out"; die "loadgen --selftest failed"; }
tail -n 1 "$work/selftest.out"

start_redis redis --unixsocket "$work/redis.sock"
keys=2000
"$LOADGEN_BIN" -p "$rport" --populate --keys "$keys" --quiet || die "populate failed"
all="get=1,hget=1,set=1,hset=1,mget=1,evalsha=1,multi=1,getattr=1,lookup=1,lookupkv=1,readdir=1,create=1,unlink=1"
for run in "c=4 P=2 mix=$all" "c=8 P=1 mix=juicefs90" "c=2 P=4 mix=juicefs99"; do
  read -r cc pp mm <<<"$run"
  log "loadgen --check-commandstats -${cc/=/ } -${pp/=/ } --mix ${mm#mix=} -n $SELFTEST_OPS"
  rc=0
  "$LOADGEN_BIN" -p "$rport" --check-commandstats -c "${cc#c=}" -P "${pp#P=}" -n "$SELFTEST_OPS" --keys "$keys" \
    --dist zipf --mix "${mm#mix=}" --quiet >"$work/check.out" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    cat "$work/check.out"
    die "loadgen --check-commandstats failed (exit $rc)"
  fi
  grep '^check-commandstats:' "$work/check.out" | tail -n 1
done

# unlink_and_writes PORT WHAT: batchunlink's unlink, then its writes, through
# PORT, each verified on Redis itself
unlink_and_writes() {
  local p=$1 what=$2
  rcli "$rport" FLUSHALL >/dev/null
  "$BATCHUNLINK_BIN" -p "$rport" --populate --files 1000 --quiet || die "batchunlink --populate failed"
  "$BATCHUNLINK_BIN" -p "$p" --unlink --files 1000 --no-header >/dev/null || die "batchunlink --unlink $what failed"
  "$BATCHUNLINK_BIN" -p "$rport" --verify-empty --files 1000 --quiet || die "unlink $what: --verify-empty failed"
  rcli "$rport" FLUSHALL >/dev/null
  "$BATCHUNLINK_BIN" -p "$p" --writes --files 1000 --no-header >/dev/null || die "batchunlink --writes $what failed"
  "$BATCHUNLINK_BIN" -p "$rport" --verify-full --files 1000 --quiet || die "writes $what: --verify-full failed"
}

log "batchunlink: populate, unlink, verify; writes, verify"
unlink_and_writes "$rport" "on Redis"
# and a verification that must fail: the directory is full, not empty
if "$BATCHUNLINK_BIN" -p "$rport" --verify-empty --files 1000 --quiet 2>/dev/null; then
  die "batchunlink --verify-empty passed on a full directory"
fi
log "batchunlink on a unix socket, --fused-watch"
rcli "$rport" FLUSHALL >/dev/null
"$BATCHUNLINK_BIN" -s "$work/redis.sock" --populate --files 1000 --quiet || die "batchunlink -s --populate failed"
# label,mode,files,batches,round_trips,...: 4 batches, 4 round trips each
fused=$("$BATCHUNLINK_BIN" -s "$work/redis.sock" --unlink --fused-watch --files 1000 --no-header) ||
  die "batchunlink -s --unlink --fused-watch failed"
[ "$(echo "$fused" | cut -d, -f4,5)" = "4,16" ] || die "--fused-watch: '$fused', not 4 batches of 4 round trips"
"$BATCHUNLINK_BIN" -p "$rport" --verify-empty --files 1000 --quiet || die "unlink --fused-watch: --verify-empty failed"
rcli "$rport" FLUSHALL >/dev/null
"$BATCHUNLINK_BIN" -p "$rport" --populate --files 1000 --quiet || die "batchunlink --populate failed"
plain=$(BATCHUNLINK_CPU=1 "$BATCHUNLINK_BIN" -p "$rport" --unlink --files 1000 --no-header 2>"$work/cpu.err") ||
  die "batchunlink --unlink failed"
[ "$(echo "$plain" | cut -d, -f4,5)" = "4,28" ] || die "--unlink: '$plain', not 4 batches of 7 round trips"
grep -Eq '^batchunlink: cpu user_us [0-9]+ sys_us [0-9]+$' "$work/cpu.err" ||
  die "BATCHUNLINK_CPU=1: no cpu line in '$(cat "$work/cpu.err")'"

log "batchunlink --pair-port: two Redis servers, batches in turn"
first=$rport
start_redis redis-pair
rcli "$first" FLUSHALL >/dev/null
# paired_unlink WHAT [ARGS...]: populates both servers, runs the paired
# unlink with ARGS, checks 4 batches of 7 round trips on each target and
# the paired line, and verifies both servers empty; WHAT names the run
paired_unlink() {
  local what=$1 p pair
  shift
  for p in "$first" "$rport"; do
    "$BATCHUNLINK_BIN" -p "$p" --populate --files 1000 --quiet || die "batchunlink --populate on :$p failed"
  done
  pair=$("$BATCHUNLINK_BIN" -p "$first" --pair-port "$rport" "$@" --label one --pair-label two --unlink \
    --files 1000 --no-header 2>"$work/pair.err") || die "batchunlink $what failed: $(cat "$work/pair.err")"
  [ "$(echo "$pair" | cut -d, -f1,4,5 | tr '\n' ' ')" = "one,4,28 two,4,28 " ] ||
    die "$what: '$pair', not 4 batches of 7 round trips for each of one and two"
  grep -Eq '^batchunlink: paired two/one [0-9]+\.[0-9]{4}$' "$work/pair.err" ||
    die "$what: no paired line in '$(cat "$work/pair.err")'"
  for p in "$first" "$rport"; do
    "$BATCHUNLINK_BIN" -p "$p" --verify-empty --files 1000 --quiet || die "$what: --verify-empty on :$p failed"
  done
}
paired_unlink --pair-port
# turns of 3 batches: 4 batches make a turn of 3 and one of 1 on each
paired_unlink "--pair-block 3" --pair-block 3
"$BATCHUNLINK_BIN" -p "$first" --pair-port "$rport" --pair-block 0 --unlink --files 10 --quiet 2>/dev/null &&
  die "--pair-block 0 was taken"
"$BATCHUNLINK_BIN" -p "$first" --pair-port "$rport" --writes --files 10 --quiet 2>/dev/null &&
  die "--pair-port took another mode than --unlink"
stop redis-pair
rport=$first

log "paired: per-repetition ratios"
[ "$(paired "1 2 4" "1.1 2 4.4")" = "1.100 (1.000–1.100)" ] || die "paired of 3: '$(paired "1 2 4" "1.1 2 4.4")'"
[ "$(paired "1 1 1 1 1 1" "0.9 1.3 1 1.1 1.2 0.8" csv)" = "1.050,0.900,1.200" ] ||
  die "paired of 6: '$(paired "1 1 1 1 1 1" "0.9 1.3 1 1.1 1.2 0.8" csv)'"

log "relay: batchunlink and a 4 MB value through it"
start_relay relay "$rport"
unlink_and_writes "$rlport" "through the relay"
head -c 3000000 /dev/urandom | base64 -w0 >"$work/big"
rcli "$rlport" -x SET big <"$work/big" >/dev/null
rcli "$rlport" GET big | cmp -s - <(cat "$work/big"; echo) || die "a 4 MB value did not come back whole through the relay"
if [ "$host_cores" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
  log "pin_hosts: PIN=1 splits the cores"
  # cores: the cores, one per line, of the "pid N's current affinity list: L"
  # that taskset -p prints (on stdin)
  cores() { sed 's/.*: //' | tr ',' '\n' | awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }' | sort -n; }
  # shellcheck disable=SC2016 # $$ is the inner shell's
  placed=$(PIN=1; pin_hosts; taskset -pc "$BASHPID" | cores | paste -sd,
    "${on_redis_host[@]}" sh -c 'taskset -pc $$' | cores | paste -sd,)
  read -r -d '' ours theirs <<<"$placed" || true
  [ -n "$ours" ] && [ -n "$theirs" ] || die "pin_hosts: a side has no core: ours '$ours', Redis's '$theirs'"
  [ -z "$(comm -12 <(tr ',' '\n' <<<"$ours" | sort) <(tr ',' '\n' <<<"$theirs" | sort))" ] ||
    die "pin_hosts: the sides share cores: ours $ours, Redis's $theirs"
  [ "$(taskset -pc $$ | cores | wc -l)" = "$host_cores" ] || die "pin_hosts in a subshell pinned the script itself"
fi
echo "selftest: bench drivers passed"
