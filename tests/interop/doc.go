// Package interop runs real client libraries (go-redis v9, the client JuiceFS
// uses) against the sidecache proxy, which forwards to a real redis-server.
// See interop_test.go and scripts/run-interop.sh. juicefs_meta.go replays
// JuiceFS 1.4's Redis metadata engine (keys, commands, transactions, the
// lookup script); juicefs_replay_test.go runs it through two proxies and
// directly on Redis at once and checks the tree through each of them.
package interop
